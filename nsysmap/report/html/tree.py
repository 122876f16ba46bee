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

from nsysmap.summaries.range_paths import path_keys

SEP = "\x1f"  # joins names into node ids; no module or range name contains it
ROOT = "all"
OUTSIDE_MODULES = "(outside modules)"
OUTSIDE_RANGES = "(outside ranges)"
MAX_NODES = 1500
# Autograd's range around each backward function, shown shorter in the tree's boxes.
EVALUATE = "autograd::engine::evaluate_function: "
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


def range_paths(ops: pl.DataFrame, by_range: pl.DataFrame | None = None) -> pl.DataFrame:
    """(names, own_ns) per innermost range path, each name as `path_keys` writes it.

    Operator ranges lose their per-call fields (`aten::mm, seq = 12, ...` is
    `aten::mm`), so the calls of one operator under one parent are one node.
    With `by_range`, operations that another thread's range took in (autograd's
    backward kernels inside the user's `backward pass`) go below that range
    where `taker_paths` finds it.
    """
    keyed = ops.select("dur_ns", key=_key_paths(ops["range_path"]))
    if by_range is not None:
        keyed = keyed.with_columns(ops["device_id"])
        takers = taker_paths(keyed, ops, by_range)
        taken = _taken(ops)
        keyed = keyed.with_columns(
            key=pl.when(taken & takers.is_not_null())
            .then(pl.concat_str(takers, pl.lit(" > "), pl.col("key"), ignore_nulls=True))
            .otherwise(pl.col("key"))
        )
    key = pl.col("key")
    names = (
        pl.when(key.is_null())
        .then(pl.concat_list(pl.lit(OUTSIDE_RANGES)))
        .otherwise(key.str.split(" > "))
    )
    return _own(keyed, names)


def _taken(ops: pl.DataFrame) -> pl.Series:
    other = pl.col("other_thread_range_id")
    return ops.select(
        (other.is_not_null() & (other != pl.col("range_id")).fill_null(True)).alias("taken")
    ).to_series()


def _key_paths(paths: pl.Series) -> pl.Series:
    """Each range path with its names as `path_keys` writes them (null stays null)."""
    distinct = paths.drop_nulls().unique().to_frame("range_path").with_row_index("i")
    names = distinct.select("i", name=pl.col("range_path").str.split(" > ")).explode("name")
    names = names.with_columns(path_keys(names["name"]).alias("name"))
    keys = names.group_by("i", maintain_order=True).agg(pl.col("name").str.join(" > "))
    joined = distinct.join(keys, on="i").select("range_path", key="name")
    found = paths.to_frame("range_path").join(
        joined, on="range_path", how="left", maintain_order="left"
    )
    return found["key"]


def taker_paths(keyed: pl.DataFrame, ops: pl.DataFrame, by_range: pl.DataFrame) -> pl.Series:
    """Per operation, the path of the range of another thread that took it in, where a
    device has one: the deepest path of by_range whose inclusive time exceeds that of
    the operations on its own thread below it by all the time taken in on the device."""
    taken = keyed.filter(_taken(ops))
    if taken.is_empty():
        return pl.Series("taker", [None] * ops.height, dtype=pl.String)
    due = taken.group_by("device_id").agg(pl.col("dur_ns").sum().alias("due_ns"))
    own = (
        keyed.filter(pl.col("key").is_not_null())
        .group_by("device_id", "key")
        .agg(pl.col("dur_ns").sum())
    )
    paths = (
        by_range.filter(pl.col("range_path").is_not_null())
        .group_by("device_id", "range_path")
        .agg(pl.col("inclusive_ns").sum())
    )
    names = pl.col("key").str.split(" > ")
    below = (  # each path's own-thread time: summed over every prefix of each key
        own.with_columns(names=names, depth=pl.int_ranges(1, names.list.len() + 1))
        .explode("depth")
        .group_by(
            "device_id", range_path=pl.col("names").list.head(pl.col("depth")).list.join(" > ")
        )
        .agg(pl.col("dur_ns").sum().alias("below_ns"))
    )
    excess = (
        paths.join(below, on=["device_id", "range_path"], how="left")
        .join(due, on="device_id")
        .filter(pl.col("inclusive_ns") - pl.col("below_ns").fill_null(0) >= pl.col("due_ns"))
        .with_columns(depth=pl.col("range_path").str.count_matches(" > "))
    )
    deepest = excess.filter(pl.col("depth") == pl.col("depth").max().over("device_id"))
    single = deepest.filter(pl.len().over("device_id") == 1).select("device_id", taker="range_path")
    return keyed.join(single, on="device_id", how="left", maintain_order="left")["taker"]


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
        label=pl.col("node").list.last().str.replace(EVALUATE, "autograd: ", literal=True),
        path=pl.when(below.list.len() > 0)
        .then(below.list.join(joiner))
        .otherwise(pl.when(size > 1).then(pl.col("node").list.last()).otherwise(pl.lit(""))),
    )
    ordered = out.sort([size, "inclusive_ns", "id"], descending=[False, True, False])
    return ordered.select(TREE.names()).cast(TREE)


def without_lone_root(nodes: pl.DataFrame) -> pl.DataFrame:
    """TREE rows without the root when it has one child and no time of its own (that
    child, holding all the time, is the root then): no level drawn for nothing."""
    root = nodes.filter(pl.col("parent") == "")
    children = nodes.filter(pl.col("parent").is_in(root["id"].implode()))
    if root.height != 1 or children.height != 1 or root["own_ns"].item() != 0:
        return nodes
    return nodes.filter(pl.col("parent") != "").with_columns(
        parent=pl.when(pl.col("id") == children["id"].item())
        .then(pl.lit(""))
        .otherwise(pl.col("parent"))
    )


def depth(nodes: pl.DataFrame) -> pl.Series:
    """Each node's level below the drawn root (the root: 1)."""
    top = nodes.filter(pl.col("parent") == "")["id"].item()
    return nodes["id"].str.count_matches(SEP) - top.count(SEP) + 1
