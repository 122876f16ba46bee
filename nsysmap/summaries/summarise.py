"""Summary tables over attributed operations (pure: ops frame in, frames out).

Each table is declared once, in SUMMARY_TABLES (name, group keys, schema,
extra columns and how they combine, whether it partitions GPU time); the
summariser, the conservation check, the writer and multi-rank outputs read
that declaration (docs/architecture.md, "Adding a summary table").

Every summary is per device and keeps null groups (time that could not be
given a phase, module, ...), so each partition's `time_ns` adds up to the
device's total and `time_share` to 1.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, NamedTuple

import polars as pl

from nsysmap.attribution.module_names import instance_class, last_part, with_ancestors
from nsysmap.core import schemas
from nsysmap.core.coded import coded, decoded, texts
from nsysmap.summaries.by_range import by_range, combine_leaves, conform_leaves, leaves_query
from nsysmap.summaries.comm_overlap import COMMUNICATION, overlap_table
from nsysmap.waits.tables import empty_waits, waits_tables


class Aggregate(NamedTuple):
    """An extra column of a summary table: its aggregation over one chunk's ops, and
    how the chunks' partial values combine (`sum`, `min` or `max` of them)."""

    over_ops: pl.Expr
    combine: Literal["sum", "min", "max"]


# How a summary table is computed (`SummaryTable.source`).
Source = Literal["grouped", "ranges", "whole"]
GROUPED: Source = "grouped"  # by its keys in every chunk of ops, the chunks' partials combined
RANGES: Source = "ranges"  # from every chunk's range leaves and the profile's ranges (by_range)
WHOLE: Source = "whole"  # from all the ops at once, after the chunks (overlap: `with_overlap`)


@dataclass(frozen=True)
class SummaryTable:
    """One summary table, written as `<name>.parquet`: the one place it is declared.

    A GROUPED table is computed from its declaration alone: per device and
    `keys`, the ops, their summed `dur_ns` (time_ns), time_share, mean_ns and
    each `extra` column; `finish`, if any, then reshapes the combined table.
    The schema (nsysmap.core.schemas, documented in docs/outputs.md) says which of
    those columns it keeps, in which order.
    """

    name: str
    schema: pl.Schema
    keys: tuple[str, ...] = ()  # group keys after device_id (GROUPED tables)
    extra: Mapping[str, Aggregate] = field(default_factory=dict)
    source: Source = GROUPED
    # Its rows add up to the device's GPU time (nsysmap.summaries.conservation checks them).
    partition: bool = True
    finish: Callable[[pl.DataFrame], pl.DataFrame] | None = None

    def grouped(self, ops: pl.LazyFrame, by: tuple[str, ...] = ()) -> pl.LazyFrame:
        """The partial result of this GROUPED table over `ops`: per `by`, device and
        keys, the ops, their summed time and each `extra` column."""
        return ops.group_by([*by, "device_id", *self.keys]).agg(
            pl.len().cast(pl.Int64).alias("ops"),
            pl.col("dur_ns").sum().alias("time_ns"),
            *(agg.over_ops.alias(column) for column, agg in self.extra.items()),
        )


# by_module's inclusive columns: the sum of each own column over the module and every module below.
INCLUSIVE = {
    "inclusive_ops": "ops",
    "inclusive_ns": "time_ns",
    "inclusive_forward_ns": "forward_ns",
    "inclusive_backward_ns": "backward_ns",
}


def _with_inclusive(by_module: pl.DataFrame) -> pl.DataFrame:
    """by_module with its INCLUSIVE columns, and a row for every module that launched
    nothing itself but lies above one that did (no ops and no time of its own).

    A module includes itself and every module below it by path prefix
    (`transformer.h.0` includes `transformer.h.0.attn.c_attn`; the root `""`
    includes every attribute path: nsysmap.attribution.module_names). The
    null module (outside every module) includes only itself.
    """
    own = list(INCLUSIVE.values())
    paths = by_module.group_by("device_id", "module").agg(pl.col(own).sum())
    up = with_ancestors(paths).group_by("device_id", "ancestor")
    inclusive = up.agg(pl.col(o).sum().alias(f"_{i}") for i, o in INCLUSIVE.items())
    implied = inclusive.join(
        paths, left_on=["device_id", "ancestor"], right_on=["device_id", "module"], how="anti"
    ).select(
        "device_id",
        pl.col("ancestor").alias("module"),
        instance_class(last_part(pl.col("ancestor"))).alias("module_class"),
        *(pl.lit(0, pl.Int64).alias(c) for c in own),
        pl.lit(0.0).alias("time_share"),
    )
    rows = pl.concat([by_module.drop(*INCLUSIVE), implied], how="diagonal_relaxed")
    out = rows.join(
        inclusive.rename({"ancestor": "module"}), on=["device_id", "module"], how="left"
    ).with_columns(pl.coalesce(f"_{i}", o).alias(i) for i, o in INCLUSIVE.items())
    ordered = out.sort(
        ["device_id", "time_ns", "inclusive_ns", "module", "module_class"],
        descending=[False, True, True, False, False],
        nulls_last=True,
    )
    return schemas.conform(ordered.select(by_module.columns), schemas.BY_MODULE, "by_module")


def _by_step_order(by_step: pl.DataFrame) -> pl.DataFrame:
    """by_step in step order (the other tables keep largest time first)."""
    return by_step.sort("device_id", "step", nulls_last=True)


_FORWARD, _BACKWARD = pl.col("direction") == "forward", pl.col("direction") == "backward"

# Every summary table, in the order written. Adding one: a declaration here, its
# schema in nsysmap.core.schemas, its section in docs/outputs.md (docs/architecture.md).
SUMMARY_TABLES: tuple[SummaryTable, ...] = (
    SummaryTable("coverage", schemas.COVERAGE, ("attribution",)),
    SummaryTable("by_phase", schemas.BY_PHASE, ("phase",)),
    SummaryTable(
        "by_step",
        schemas.BY_STEP,
        ("step",),
        {
            "first_start_ns": Aggregate(pl.col("start_ns").min(), "min"),
            "last_end_ns": Aggregate(pl.col("end_ns").max(), "max"),
        },
        finish=_by_step_order,
    ),
    SummaryTable(
        "by_module",
        schemas.BY_MODULE,
        ("module", "module_class"),
        {
            "forward_ns": Aggregate(pl.col("dur_ns").filter(_FORWARD).sum(), "sum"),
            "backward_ns": Aggregate(pl.col("dur_ns").filter(_BACKWARD).sum(), "sum"),
        },
        finish=_with_inclusive,
    ),
    SummaryTable("by_module_phase", schemas.BY_MODULE_PHASE, ("module", "module_class", "phase")),
    SummaryTable(
        "by_kernel",
        schemas.BY_KERNEL,
        ("kind", "name", "short_name", "category"),
        {
            "min_ns": Aggregate(pl.col("dur_ns").min(), "min"),
            "max_ns": Aggregate(pl.col("dur_ns").max(), "max"),
        },
    ),
    SummaryTable("by_category", schemas.BY_CATEGORY, ("category",)),
    SummaryTable("by_range", schemas.BY_RANGE, source=RANGES),
    # Communication kernels only: not a partition of GPU time (nsysmap.summaries.comm_overlap).
    SummaryTable("overlap", schemas.OVERLAP, source=WHOLE, partition=False),
)
SUMMARY_SCHEMAS: dict[str, pl.Schema] = {t.name: t.schema for t in SUMMARY_TABLES}
# Summary tables that do not split the device's GPU time, so they do not add up to it.
NOT_PARTITIONS = tuple(t.name for t in SUMMARY_TABLES if not t.partition)
# The partial results of by_range (see nsysmap.summaries.by_range) in `partial_summaries`.
LEAVES = "range_leaves"


@dataclass(frozen=True)
class Summaries:
    """The summary tables written next to ops.parquet, by name (SUMMARY_TABLES).

    A table reads as an attribute (`summaries.by_phase`) or by name (`tables()`).
    """

    frames: Mapping[str, pl.DataFrame]  # in SUMMARY_TABLES order
    # Where the GPU waits: idle, stream_idle, launch_cost (nsysmap.waits; not partitions
    # of GPU time, and not summed over ranks: written by the flow beside `tables()`).
    waits: dict[str, pl.DataFrame] = field(default_factory=empty_waits)

    def __getattr__(self, name: str) -> pl.DataFrame:
        if name != "frames" and name in self.frames:
            return self.frames[name]
        raise AttributeError(f"{type(self).__name__} has no table {name!r}")

    def tables(self) -> dict[str, pl.DataFrame]:
        """Name -> frame, in SUMMARY_TABLES order."""
        return dict(self.frames)

    def replaced(self, **frames: pl.DataFrame) -> Summaries:
        """These summaries with the tables named in `frames` replaced."""
        unknown = set(frames) - set(self.frames)
        if unknown:
            raise KeyError(f"not summary tables: {sorted(unknown)}")
        return replace(self, frames={**self.frames, **frames})


def summarise(ops: pl.DataFrame, ranges: pl.DataFrame | None = None) -> Summaries:
    """All summary tables for an OPS frame.

    by_range needs the profile's nested ranges (`profile.ranges`); without
    them it is left empty.
    """
    return with_overlap(combine_summaries([partial_summaries(ops)], ranges), ops)


def with_overlap(summaries: Summaries, ops: pl.DataFrame | pl.LazyFrame) -> Summaries:
    """`summaries` with the communication overlap of `ops` (all of them at once).

    Where `summaries.by_category` (of the same operations, or more) has no
    communication, the overlap is empty without reading `ops` again: a
    profile without collectives (the common case) reads none of its
    operations' columns here, once per device where they were streamed.
    """
    if not summaries.by_category["category"].eq(COMMUNICATION).any():
        return summaries.replaced(overlap=schemas.empty(schemas.OVERLAP))
    return summaries.replaced(overlap=overlap_table(ops))


def with_waits(
    summaries: Summaries,
    ops: pl.DataFrame | pl.LazyFrame,
    api_calls: pl.DataFrame,
    ranges: pl.DataFrame,
    launches: pl.DataFrame | None = None,
) -> Summaries:
    """`summaries` with the waits tables of `ops` (nsysmap.waits: the profile's API
    calls give launch-call times and synchronisations, its ranges `.item()` calls;
    `launches` the launch calls the attribution found, when given)."""
    return replace(summaries, waits=waits_tables(ops, api_calls, ranges, launches))


def partial_summaries(
    ops: pl.DataFrame, tables: tuple[SummaryTable, ...] = SUMMARY_TABLES
) -> dict[str, pl.DataFrame]:
    """Per GROUPED table, the groups of `ops` with counts, sums, minima and maxima;
    and the range leaves (LEAVES) that by_range is made from.

    Partial results of disjoint sets of ops combine into the summaries of
    their union (`combine_summaries`), so large profiles can be summarised
    chunk by chunk.
    """
    lazy = ops.lazy()
    grouped = [table for table in tables if table.source == GROUPED]
    keys = texts(ops, (k for table in grouped for k in table.keys))
    by_codes = lazy.with_columns(coded(keys))  # nsysmap.core.coded: each text held once
    queries = {table.name: table.grouped(by_codes) for table in grouped}
    queries[LEAVES] = leaves_query(lazy)
    # Collected together: one pass of the engine over `ops` for every table.
    partial = {
        name: decoded(frame, keys)
        for name, frame in zip(queries, pl.collect_all(queries.values()), strict=True)
    }
    return {**partial, LEAVES: conform_leaves(partial[LEAVES])}


def combine_summaries(
    parts: list[dict[str, pl.DataFrame]],
    ranges: pl.DataFrame | None = None,
    tables: tuple[SummaryTable, ...] = SUMMARY_TABLES,
) -> Summaries:
    """The summary tables from the partial results of disjoint sets of ops.

    by_range needs the profile's nested ranges; without them it is left empty.
    The WHOLE tables (overlap) are left empty: `with_overlap` adds them.
    """
    frames = {table.name: schemas.empty(table.schema) for table in tables}
    for table in tables:
        if table.source == GROUPED:
            frames[table.name] = _combined(table, [part[table.name] for part in parts])
    for table in tables:
        if table.source == RANGES and ranges is not None:
            frames[table.name] = by_range(combine_leaves([p[LEAVES] for p in parts]), ranges)
    return Summaries(frames)


_COMBINE = {"sum": pl.Expr.sum, "min": pl.Expr.min, "max": pl.Expr.max}


def _combined(table: SummaryTable, parts: list[pl.DataFrame]) -> pl.DataFrame:
    """GROUPED `table` from its partial results (one part is already one row per group)."""
    keys = list(table.keys)
    grouped = (
        parts[0]
        if len(parts) == 1
        else pl.concat(parts)
        .group_by(["device_id", *keys])
        .agg(
            pl.col("ops").sum(),
            pl.col("time_ns").sum(),
            *(_COMBINE[agg.combine](pl.col(c)).alias(c) for c, agg in table.extra.items()),
        )
    )
    done = _finished(grouped, keys, table.schema, table.name)
    return table.finish(done) if table.finish is not None else done


def _finished(
    grouped: pl.DataFrame, keys: list[str], schema: pl.Schema, table: str
) -> pl.DataFrame:
    """Share of the device's time, derived columns; largest first."""
    device_total = pl.col("time_ns").sum().over("device_id")
    done = grouped.with_columns(
        pl.when(device_total > 0)
        .then(pl.col("time_ns") / device_total)
        .otherwise(0.0)
        .alias("time_share"),
        (pl.col("time_ns") / pl.col("ops")).alias("mean_ns"),
        *(pl.lit(0, pl.Int64).alias(name) for name in INCLUSIVE),
    ).sort(
        ["device_id", "time_ns", *keys],
        descending=[False, True, *[False] * len(keys)],
        nulls_last=True,
    )
    return schemas.conform(done.select(schema.names()), schema, table)
