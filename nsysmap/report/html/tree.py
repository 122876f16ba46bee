"""The tree behind the icicle chart: time over the module tree, or over the range tree.

Nodes are paths (lists of names). Each operation's time goes to its own
node (its module, or its innermost range); ancestors without operations
are added with no time of their own, so the icicle shows inclusive time:

    transformer.h.0.attn  ->  (model) / transformer / h / 0 / attn

Large trees are cut to the `limit` nodes with the most inclusive time (a set
closed under ancestors, since a parent has at least its children's time);
the time of a node left out goes to its nearest ancestor kept, so the root
still holds all time. Vectorised over paths; nothing is dropped.
"""

from __future__ import annotations

import polars as pl

SEP = "\x1f"  # joins names into node ids; no module or range name contains it
ROOT = "all"
OUTSIDE_MODULES = "(outside modules)"
OUTSIDE_RANGES = "(outside ranges)"
MAX_NODES = 1500
MAX_DEPTH = 12

TREE = pl.Schema(
    {
        "id": pl.String,
        "parent": pl.String,  # "" for the root
        "label": pl.String,
        "path": pl.String,  # the module path or range path, as ops.parquet writes it
        "own_ns": pl.Int64,
        "inclusive_ns": pl.Int64,
    }
)


def module_paths(ops: pl.DataFrame, root_label: str) -> pl.DataFrame:
    """(names, own_ns) per module; the root module is `root_label`, its path "" below it."""
    module = pl.col("module")
    names = (
        pl.when(module.is_null())
        .then(pl.concat_list(pl.lit(OUTSIDE_MODULES)))
        .when(module == "")
        .then(pl.concat_list(pl.lit(root_label)))
        .otherwise(pl.concat_list(pl.lit(root_label), module.str.split(".")))
    )
    return _own(ops, names)


def range_paths(ops: pl.DataFrame) -> pl.DataFrame:
    """(names, own_ns) per innermost range path."""
    rp = pl.col("range_path")
    names = (
        pl.when(rp.is_null())
        .then(pl.concat_list(pl.lit(OUTSIDE_RANGES)))
        .otherwise(rp.str.split(" > "))
    )
    return _own(ops, names)


def _own(ops: pl.DataFrame, names: pl.Expr) -> pl.DataFrame:
    rooted = pl.concat_list(pl.lit(ROOT), names.list.head(MAX_DEPTH))
    return (
        ops.select(names=rooted, dur_ns=pl.col("dur_ns"))
        .group_by("names")
        .agg(pl.col("dur_ns").sum().alias("own_ns"))
    )


def tree(own: pl.DataFrame, joiner: str, skip: int = 0, limit: int = MAX_NODES) -> pl.DataFrame:
    """TREE rows (root first, then by inclusive time) from `module_paths` / `range_paths`.

    `path` joins the names below the root with `joiner`, leaving out the first
    `skip` (the root module's label in the module tree).
    """
    leaves = own.with_columns(leaf=pl.col("names").list.join(SEP))
    prefixes = (
        leaves.with_columns(depth=pl.int_ranges(1, pl.col("names").list.len() + 1))
        .explode("depth")
        .with_columns(node=pl.col("names").list.head(pl.col("depth")))
        .with_columns(id=pl.col("node").list.join(SEP))
    )
    nodes = prefixes.group_by("id").agg(
        pl.col("node").first(), pl.col("own_ns").sum().alias("inclusive_ns")
    )
    kept = nodes.sort(
        ["inclusive_ns", pl.col("node").list.len(), "id"], descending=[True, False, False]
    ).head(max(limit, 1))
    # each leaf's time goes to its deepest kept prefix (the root at least)
    placed = (
        prefixes.join(kept.select("id"), on="id", how="semi")
        .sort("depth")
        .group_by("leaf")
        .agg(pl.col("id").last(), pl.col("own_ns").first())
        .group_by("id")
        .agg(pl.col("own_ns").sum())
    )
    size = pl.col("node").list.len()
    below = pl.col("node").list.slice(1 + skip)
    out = kept.join(placed, on="id", how="left").with_columns(
        own_ns=pl.col("own_ns").fill_null(0),
        parent=pl.col("node").list.head(size - 1).list.join(SEP),
        label=pl.col("node").list.last(),
        path=pl.when(below.list.len() > 0)
        .then(below.list.join(joiner))
        .otherwise(pl.when(size > 1).then(pl.col("node").list.last()).otherwise(pl.lit(""))),
    )
    ordered = out.sort([size, "inclusive_ns", "id"], descending=[False, True, False])
    return ordered.select(TREE.names()).cast(TREE)
