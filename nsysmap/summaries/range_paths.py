"""Range paths as by_range writes them (pure): names without per-call fields, step
numbers starred, and the path of every range instance, built level by level.

A path is a range's name and the names of the ranges around it on its thread,
outermost first, joined by " > " (nsysmap.attribution.paths.PATH_SEPARATOR),
with PyTorch's operator fields removed (`labels.OPERATOR_CALL_FIELDS`) and step
numbers as `*` (`ProfilerStep#*`), so that repeated calls share one path.
`node_paths` gives every range instance (a node of the nesting forest,
nsysmap.summaries.range_tree) its path id, over the distinct (parent path, name)
pairs of each level; nsysmap.summaries.by_range sums time over them.
"""

from __future__ import annotations

import polars as pl

from nsysmap.attribution.labels import (
    OPERATOR_CALL_FIELDS,
    OPERATOR_RANGE,
    STEP_NUMBER,
    name_labels,
    without_call_fields,
)
from nsysmap.attribution.paths import PATH_SEPARATOR
from nsysmap.core.range_names import PREFIX as NSYSMAP
from nsysmap.core.scalars import to_int


def domain_codes(domain: pl.Series) -> pl.DataFrame:
    """Each range's domain as an integer `code` (null: none), beside the text: the tables
    group by the code, and name it at the end."""
    if domain.null_count() == domain.len():  # the common case: no domain anywhere
        code = pl.repeat(None, domain.len(), dtype=pl.UInt32, eager=True)
    else:
        code = domain.cast(pl.Categorical).to_physical()
    return pl.DataFrame({"code": code, "domain": domain})


def domain_names(domains: pl.DataFrame) -> pl.DataFrame:
    """dom (a code of `domain_codes`) -> domain, once per code."""
    named = domains.drop_nulls("code").unique("code", keep="any")
    return named.select(dom="code", domain="domain")


def path_keys(names: pl.Series) -> pl.Series:
    """Range names as paths write them: PyTorch's per-call operator fields removed,
    step numbers as `*` (`ProfilerStep#*`)."""
    return _starred(without_call_fields(names).fill_null(""))


def _starred(keys: pl.Series) -> pl.Series:
    """`keys` (call fields removed) with step numbers as `*`."""
    distinct = keys.unique()
    step = name_labels(distinct, ["lbl_aten_op", "lbl_step"])["lbl_step"]
    steps = distinct.filter(step.is_not_null())
    if steps.is_empty():
        return keys
    starred = steps.str.replace(STEP_NUMBER, "*${1}")
    return keys.replace(steps, starred)


def path_key_codes(names: pl.Series) -> tuple[pl.Series, pl.Series]:
    """(a code per name, the distinct `path_keys` by code): equal keys, equal codes.

    Step numbers are starred over the distinct names without call fields, not
    over every name.
    """
    bare = without_call_fields(names).fill_null("")
    raw = bare.cast(pl.Categorical).to_physical()
    distinct = pl.DataFrame({"raw": raw, "bare": bare}).unique("raw", keep="any")
    keys = _starred(distinct["bare"])
    code = (keys.rank("dense") - 1).cast(pl.Int64)
    code_of_raw = pl.repeat(None, to_int(raw.max() or 0) + 1, dtype=pl.Int64, eager=True)
    code_of_raw = code_of_raw.scatter(distinct["raw"], code)
    return code_of_raw.gather(raw).alias("code"), keys.unique().sort()


def is_user_range(name: pl.Expr) -> pl.Expr:
    """A name of the user's own: not a PyTorch operator range, not one of nsysmap's."""
    bare = name.str.replace(OPERATOR_CALL_FIELDS, "")
    return ~bare.str.contains(OPERATOR_RANGE) & ~bare.str.starts_with(NSYSMAP)


def node_paths(
    forest: pl.DataFrame, ranges: pl.DataFrame, nodes: pl.Series, domain: pl.Series
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(pos, path_id, dom of `nodes`; path_id, range_path, range_name, range_depth).

    `domain`: each range's domain code (row order); `dom` is that of the node.

    `nodes` holds every ancestor of each of its members (a range with an
    operation inside has it inside every range around it), so each level's
    paths extend the level above's. Per level, a node's path is one integer
    (its parent's path id and its name's code): parents' paths are gathered
    by pos and only the level's distinct paths get text.
    """
    # nodes are positions (pos = row number of the forest): a mask, not a hash of them
    picked = forest.filter(pl.repeat(False, forest.height, eager=True).scatter(nodes, True))
    # Names read in row order (strings gathered in pre-order are slow), codes gathered.
    kept = pl.repeat(False, ranges.height, eager=True).scatter(picked["row"], True)
    codes, keys = path_key_codes(ranges["name"].filter(kept))
    index = kept.cast(pl.Int64).cum_sum() - 1
    picked = picked.select("pos", "parent", "depth").with_columns(
        code=codes.gather(index.gather(picked["row"])),
        dom=domain.gather(picked["row"]),
    )
    n_codes = keys.len()
    path_of = pl.repeat(None, forest.height + 1, dtype=pl.Int64, eager=True)
    node_path, paths = [_NO_NODES], [_NO_PATHS]
    for depth in range(1, to_int(picked["depth"].max() or 0) + 1):
        level = picked.filter(pl.col("depth") == depth)
        if depth == 1:
            level, above = level.with_columns(up=pl.lit(None, pl.Int64)), pl.lit("")
        else:
            level = level.with_columns(up=path_of.gather(level["parent"]))
            above = pl.col("above") + PATH_SEPARATOR
        # (parent's path, name) as one integer; a missing parent path apart (-1).
        level = level.with_columns(pair=(pl.col("up").fill_null(-1) + 1) * n_codes + pl.col("code"))
        first_id = sum(p.height for p in paths)
        distinct = level.select("pair", "up", "code").unique(
            "pair", keep="first", maintain_order=True
        )
        distinct = distinct.with_columns(
            path_id=pl.int_range(first_id, first_id + pl.len(), dtype=pl.Int64),
            key=keys.gather(distinct["code"]),
        )
        texts = paths[-1].select(up="path_id", above="range_path")
        paths.append(
            distinct.join(texts, on="up", how="left").select(
                "path_id",
                range_path=pl.concat_str(above, "key"),
                range_name="key",
                range_depth=pl.lit(depth, pl.Int32),
            )
        )
        done = level.join(distinct.select("pair", "path_id"), on="pair")
        path_of.scatter(done["pos"], done["path_id"])
        node_path.append(done.select("pos", "path_id", "dom"))
    return pl.concat(node_path), pl.concat(paths)


_NO_NODES = pl.DataFrame(schema={"pos": pl.UInt32, "path_id": pl.Int64, "dom": pl.UInt32})
_NO_PATHS = pl.DataFrame(
    schema={
        "path_id": pl.Int64,
        "range_path": pl.String,
        "range_name": pl.String,
        "range_depth": pl.Int32,
    }
)
