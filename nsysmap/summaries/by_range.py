"""GPU time per range path: exclusive, inclusive, calls and projected span (pure).

A range's *path* is its name and the names of the ranges around it on its
thread, outermost first, joined by " > ", with per-call ids removed so that
repeated calls share one path: PyTorch's operator fields
(`labels.OPERATOR_CALL_FIELDS`: every call of `aten::addmm` under one parent)
and step numbers (`ProfilerStep#*`). Per device and path:

    thread 1   |------------------ A -------------------|      A      calls 1, ops 1
                  |--- B ---|            |--- B ---|           A > B  calls 2, ops 3
    launches        k1  k2       k3        k4
    GPU              [k1][k2]     [k3]        [k4]
                     <-span->                 <>               span of A > B: both, summed

* exclusive (`ops`, `time_ns`): operations whose innermost range has the path;
  they add up to the device's total (operations outside every range: null path);
* inclusive: operations launched inside an instance of the path, at any depth,
  and those that took their step or phase from it on another thread (OPS
  `other_thread_range_id`: autograd's backward kernels count inside the user's
  `backward pass` as well as inside their own thread's operator ranges).
  Instances of one path never nest, so nothing is counted twice;
* `calls`: instances of the path with at least one operation inside;
* `span_ns`: per instance, first GPU start to last GPU end of those operations.

How: operations are summed per innermost range (`range_leaves`, also chunk
by chunk); `nsysmap.summaries.range_tree` answers every range instance at once
from the ranges in nesting pre-order. Paths are built level by level over
distinct (parent path, name) pairs (nsysmap.summaries.range_paths). Ranges
nested more than MAX_PATH_DEPTH deep are folded into one row
`<path at that depth> > …` (exclusive time of everything below it).
"""

from __future__ import annotations

import polars as pl

from nsysmap.attribution.paths import PATH_SEPARATOR
from nsysmap.core import schemas
from nsysmap.core.scalars import to_int
from nsysmap.intervals.preorder import Preorder
from nsysmap.summaries.range_paths import domain_codes, domain_names, node_paths
from nsysmap.summaries.range_tree import from_preorder, instances, positions_of, preorder

MAX_PATH_DEPTH = 64
FOLDED = "…"

# Operations per (device, innermost range): partial sums that combine.
RANGE_LEAVES = pl.Schema(
    {
        "device_id": pl.Int64,
        "range_id": pl.Int64,
        "ops": pl.Int64,
        "time_ns": pl.Int64,
        "first_start_ns": pl.Int64,
        "last_end_ns": pl.Int64,
        # True: operations taken in by a range of another thread (inclusive only)
        "taken": pl.Boolean,
    }
)


def range_leaves(ops: pl.DataFrame) -> pl.DataFrame:
    """RANGE_LEAVES of an OPS frame (or of a chunk of it)."""
    return conform_leaves(leaves_query(ops.lazy()).collect())


def leaves_query(ops: pl.LazyFrame) -> pl.LazyFrame:
    """The query of `range_leaves` (to collect with others; then `conform_leaves`).

    Operations per innermost range, then (`taken`) per range of another thread
    that gave them their step or phase, when that is not their innermost range.
    """
    sums = (
        pl.len().cast(pl.Int64).alias("ops"),
        pl.col("dur_ns").sum().alias("time_ns"),
        pl.col("start_ns").min().alias("first_start_ns"),
        pl.col("end_ns").max().alias("last_end_ns"),
    )
    own = ops.group_by("device_id", "range_id").agg(*sums).with_columns(taken=pl.lit(False))
    other = pl.col("other_thread_range_id")
    taken = ops.filter(other.is_not_null() & (other != pl.col("range_id")).fill_null(True))
    taken = taken.group_by("device_id", range_id=other).agg(*sums)
    return pl.concat([own, taken.with_columns(taken=pl.lit(True))])


def conform_leaves(leaves: pl.DataFrame) -> pl.DataFrame:
    """`leaves` (collected from `leaves_query`) as RANGE_LEAVES."""
    return schemas.conform(leaves, RANGE_LEAVES, "range_leaves")


def combine_leaves(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """The RANGE_LEAVES of the union of disjoint sets of operations, for `by_range`.

    The parts are only stacked: a (device, range) whose operations fall in
    several parts keeps a row per part, which `by_range` adds up like any
    other leaves of one path (regrouping the ~0.9 leaves per operation of a
    large profile would cost a hash group-by of them all).
    """
    if len(parts) == 1:
        return conform_leaves(parts[0])
    return pl.concat([schemas.empty(RANGE_LEAVES), *parts], rechunk=True)


def by_range(
    leaves: pl.DataFrame, ranges: pl.DataFrame, found: Preorder | None = None
) -> pl.DataFrame:
    """BY_RANGE from the leaves of every operation and the profile's nested ranges.

    A (device, range) may have several rows in `leaves` (see `combine_leaves`):
    every use below adds them up. `found`: the ranges' pre-order as attribution
    found it (nsysmap.attribution.attribute), when it did; else it is sorted here.
    """
    forest = preorder(ranges) if found is None else from_preorder(found, ranges["range_id"])
    placed = _placed(leaves, forest, ranges["range_id"])
    inside = instances(placed, forest, MAX_PATH_DEPTH)
    domains = domain_codes(ranges["domain"])
    node_path, paths = node_paths(forest, ranges, inside["pos"].unique(), domains["code"])
    own = _exclusive(placed, forest)
    rows = pl.concat([_path_rows(inside, own, node_path, paths.height), _outside(placed)])
    paths = pl.concat([paths, _folded_paths(own, node_path, paths)])
    return _finished(rows, paths, domain_names(domains))


def merge_by_range(tables: list[pl.DataFrame], carried: pl.DataFrame | None = None) -> pl.DataFrame:
    """One BY_RANGE from those of disjoint sets of range instances (the processes
    of one profile, say): per (device, path, domain), calls, sums and spans add
    up, since each counts instances and no instance is in two sets.

    `carried`: instances counted in several tables (a range read into two time
    windows, nsysmap.sources.by_window), one row per table, device and range: the
    by_range key, range_id, and the first start and last end of the operations
    inside it there. Each is one call, and its span runs from its first
    start to its last end over the tables, not the sum of the tables' spans
    (its operations and times add up as they are).
    """
    if len(tables) == 1:
        return tables[0]
    keys = ["device_id", "range_path", "range_name", "domain", "range_depth"]
    summed = ["calls", "ops", "time_ns", "inclusive_ops", "inclusive_ns"]
    rows = (
        pl.concat([*tables, *_carried_once(carried, keys)], how="diagonal")
        .group_by(keys)
        .agg(
            pl.col(summed).sum(),
            # Null (the operations outside every range) stays null.
            pl.when(pl.col("span_ns").is_not_null().any()).then(pl.col("span_ns").sum()),
        )
    )
    return _shared_and_sorted(rows)


def _carried_once(carried: pl.DataFrame | None, keys: list[str]) -> list[pl.DataFrame]:
    """Rows that, added to the tables', count each of `carried`'s instances once:
    calls less its extra tables, span its whole less the sum of its parts."""
    if carried is None or carried.is_empty():
        return []
    span = pl.col("end_ns") - pl.col("start_ns")
    per = carried.group_by([*keys, "range_id"]).agg(
        extra=pl.len() - 1,
        whole=pl.col("end_ns").max() - pl.col("start_ns").min(),
        parts=span.sum(),
    )
    fix = (
        per.filter(pl.col("extra") > 0)
        .group_by(keys)
        .agg(
            calls=-pl.col("extra").sum().cast(pl.Int64),
            span_ns=(pl.col("whole") - pl.col("parts")).sum(),
        )
    )
    types = schemas.BY_RANGE
    return [fix.cast({c: types[c] for c in fix.columns})]


def _placed(leaves: pl.DataFrame, forest: pl.DataFrame, ids: pl.Series) -> pl.DataFrame:
    """Leaves with their range's pos, thread code and depth (null: outside every range).

    `ids`: the profile's range ids, row by row.
    """
    pos = positions_of(forest, ids, leaves["range_id"])
    if pos is None:
        columns = forest.select("range_id", "pos", "g", "depth")
        placed = leaves.join(columns, on="range_id", how="left")
    else:
        placed = pl.concat(
            [leaves, forest.select("g", "depth")[pos].with_columns(pos=pos)], how="horizontal"
        )
    lost = placed.filter(pl.col("range_id").is_not_null() & pl.col("pos").is_null())
    if lost.height:
        raise ValueError(f"{lost.height} range ids of the operations are not in the ranges")
    return placed


def _exclusive(placed: pl.DataFrame, forest: pl.DataFrame) -> pl.DataFrame:
    """Leaves inside a range, on the range that holds them in by_range (`node`).

    That is their innermost range, or for ranges nested deeper than
    MAX_PATH_DEPTH their ancestor at that depth (`folded` true): in pre-order,
    the last range of that depth on the thread at or before them.
    """
    inner = placed.filter(pl.col("pos").is_not_null() & ~pl.col("taken"))
    deep = pl.col("depth") > MAX_PATH_DEPTH
    kept = inner.filter(~deep).with_columns(node=pl.col("pos"), folded=pl.lit(False))
    folded = inner.filter(deep).sort("pos")
    if folded.height:
        cut = forest.filter(pl.col("depth") == MAX_PATH_DEPTH).select("g", "pos", node="pos")
        folded = folded.join_asof(cut.sort("pos"), on="pos", by="g", check_sortedness=False)
        folded = folded.with_columns(folded=pl.lit(True))
        return pl.concat([kept, folded.select(kept.columns)])
    return kept


def _path_rows(
    inside: pl.DataFrame, own: pl.DataFrame, node_path: pl.DataFrame, n_paths: int
) -> pl.DataFrame:
    """One row per (device, path, domain code): calls, exclusive and inclusive sums, span.

    Folded leaves (see `_exclusive`) make a row of their own per ancestor
    path, with path id `n_paths` + the ancestor's.
    """
    keys = ["device_id", "path_id", "dom"]
    calls = (
        _with_path(inside, "pos", node_path)
        .group_by(keys)
        .agg(
            pl.len().cast(pl.Int64).alias("calls"),
            pl.col("inclusive_ops").sum(),
            pl.col("inclusive_ns").sum(),
            pl.col("span_ns").sum(),
        )
    )
    placed = _with_path(own, "node", node_path)
    mine = placed.filter(~pl.col("folded")).group_by(keys).agg(pl.col("ops", "time_ns").sum())
    rows = calls.join(mine, on=keys, how="left", nulls_equal=True).with_columns(
        pl.col("ops", "time_ns").fill_null(0)
    )
    return pl.concat([rows, _folded_rows(placed, n_paths).select(rows.columns)])


def _with_path(frame: pl.DataFrame, at: str, node_path: pl.DataFrame) -> pl.DataFrame:
    """`frame` with the path_id and dom of the node at column `at` (an inner join
    on pos, by gathers: node_path holds each pos once)."""
    if frame.is_empty() or node_path.is_empty():
        return frame.join(node_path, left_on=at, right_on="pos")
    size = max(to_int(node_path["pos"].max()), to_int(frame[at].max())) + 1
    where = pl.repeat(None, size, dtype=pl.UInt32, eager=True)
    where = where.scatter(
        node_path["pos"], pl.int_range(node_path.height, dtype=pl.UInt32, eager=True)
    )
    found = where.gather(frame[at])
    hit = found.is_not_null()
    columns = node_path.select("path_id", "dom")
    if hit.all():
        return pl.concat([frame, columns[found]], how="horizontal")
    return pl.concat([frame.filter(hit), columns[found.filter(hit)]], how="horizontal")


def _folded_rows(placed: pl.DataFrame, n_paths: int) -> pl.DataFrame:
    """Per device and ancestor path, the operations folded below it: `<path> > …`."""
    per_call = (
        placed.filter("folded")
        .group_by("device_id", "path_id", "node")
        .agg(
            pl.col("ops", "time_ns").sum(),
            (pl.col("last_end_ns").max() - pl.col("first_start_ns").min()).alias("span_ns"),
        )
    )
    return (
        per_call.group_by("device_id", "path_id")
        .agg(pl.len().cast(pl.Int64).alias("calls"), pl.col("ops", "time_ns", "span_ns").sum())
        .select(
            "device_id",
            pl.col("path_id") + n_paths,
            pl.lit(None, pl.UInt32).alias("dom"),
            "calls",
            pl.col("ops").alias("inclusive_ops"),
            pl.col("time_ns").alias("inclusive_ns"),
            "span_ns",
            "ops",
            "time_ns",
        )
    )


def _folded_paths(own: pl.DataFrame, node_path: pl.DataFrame, paths: pl.DataFrame) -> pl.DataFrame:
    """Paths of the folded rows: `<ancestor's path> > …`, id `paths.height` + the ancestor's."""
    ids = own.filter("folded").join(node_path, left_on="node", right_on="pos")["path_id"].unique()
    return paths.filter(pl.col("path_id").is_in(ids.implode())).select(
        pl.col("path_id") + paths.height,
        pl.col("range_path") + PATH_SEPARATOR + FOLDED,
        range_name=pl.lit(FOLDED),
        range_depth=pl.lit(MAX_PATH_DEPTH + 1, pl.Int32),
    )


def _outside(placed: pl.DataFrame) -> pl.DataFrame:
    """Per device, the operations outside every range (null path)."""
    return (
        placed.filter(pl.col("range_id").is_null() & ~pl.col("taken"))
        .group_by("device_id")
        .agg(pl.col("ops", "time_ns").sum())
        .select(
            "device_id",
            pl.lit(None, pl.Int64).alias("path_id"),
            pl.lit(None, pl.UInt32).alias("dom"),
            pl.lit(0, pl.Int64).alias("calls"),
            pl.col("ops").alias("inclusive_ops"),
            pl.col("time_ns").alias("inclusive_ns"),
            pl.lit(None, pl.Int64).alias("span_ns"),
            "ops",
            "time_ns",
        )
    )


def _finished(rows: pl.DataFrame, paths: pl.DataFrame, domains: pl.DataFrame) -> pl.DataFrame:
    """Path and domain names, shares of the device's time; sorted by device and path."""
    rows = rows.join(domains, on="dom", how="left")
    return _shared_and_sorted(rows.join(paths, on="path_id", how="left"))


def _shared_and_sorted(rows: pl.DataFrame) -> pl.DataFrame:
    """BY_RANGE from named rows: shares of the device's time; sorted by device and path."""
    total = pl.col("time_ns").sum().over("device_id")
    done = rows.with_columns(
        time_share=pl.when(total > 0).then(pl.col("time_ns") / total).otherwise(0.0),
        inclusive_share=pl.when(total > 0).then(pl.col("inclusive_ns") / total).otherwise(0.0),
    )
    done = done.sort(["device_id", "range_path", "domain"], nulls_last=True)
    return schemas.conform(done.select(schemas.BY_RANGE.names()), schemas.BY_RANGE, "by_range")
