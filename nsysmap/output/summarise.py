"""Summary tables over attributed operations (pure: ops frame in, frames out).

Every summary is per device and keeps null groups (time that could not be
given a phase, module, ...), so each table's `time_ns` adds up to the
device's total and `time_share` to 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from nsysmap import schemas
from nsysmap.attribution.module_names import instance_class, last_part, with_ancestors
from nsysmap.output.by_range import by_range, combine_leaves, conform_leaves, leaves_query
from nsysmap.output.comm_overlap import overlap_table
from nsysmap.waits.tables import empty_waits, waits_tables

COVERAGE = schemas.declare(
    {
        "device_id": pl.Int64,
        "attribution": schemas.Attribution,
        "ops": pl.Int64,
        "time_ns": pl.Int64,
        "time_share": pl.Float64,
    }
)


@dataclass(frozen=True)
class Summaries:
    """The summary tables written next to ops.parquet."""

    coverage: pl.DataFrame
    by_phase: pl.DataFrame
    by_step: pl.DataFrame
    by_module: pl.DataFrame
    by_module_phase: pl.DataFrame
    by_kernel: pl.DataFrame
    by_category: pl.DataFrame
    by_range: pl.DataFrame
    # Communication overlap (not a partition of GPU time; nsysmap.output.comm_overlap).
    overlap: pl.DataFrame = field(default_factory=lambda: schemas.empty(schemas.OVERLAP))
    # Where the GPU waits: idle, stream_idle, launch_cost (nsysmap.waits; not partitions
    # of GPU time, and not summed over ranks: written by the flow beside `tables()`).
    waits: dict[str, pl.DataFrame] = field(default_factory=empty_waits)

    def tables(self) -> dict[str, pl.DataFrame]:
        """Name -> frame, in a fixed order."""
        return {name: getattr(self, name) for name in SUMMARY_SCHEMAS}


SUMMARY_SCHEMAS: dict[str, pl.Schema] = {
    "coverage": COVERAGE,
    "by_phase": schemas.BY_PHASE,
    "by_step": schemas.BY_STEP,
    "by_module": schemas.BY_MODULE,
    "by_module_phase": schemas.BY_MODULE_PHASE,
    "by_kernel": schemas.BY_KERNEL,
    "by_category": schemas.BY_CATEGORY,
    "by_range": schemas.BY_RANGE,
    "overlap": schemas.OVERLAP,
}
# The partial results of by_range (see nsysmap.output.by_range) in `partial_summaries`.
LEAVES = "range_leaves"


# Summary tables that do not split the device's GPU time (overlap covers only
# communication kernels), so they do not add up to it.
NOT_PARTITIONS = ("overlap",)


# Group keys of each table (after device_id).
KEYS = {
    "coverage": ["attribution"],
    "by_phase": ["phase"],
    "by_step": ["step"],
    "by_module": ["module", "module_class"],
    "by_module_phase": ["module", "module_class", "phase"],
    "by_kernel": ["kind", "name", "short_name", "category"],
    "by_category": ["category"],
}
# Extra columns: how each is aggregated over ops, and how partial results combine.
_FORWARD, _BACKWARD = pl.col("direction") == "forward", pl.col("direction") == "backward"
EXTRA = {
    "by_step": {
        "first_start_ns": (pl.col("start_ns").min(), "min"),
        "last_end_ns": (pl.col("end_ns").max(), "max"),
    },
    "by_module": {
        "forward_ns": (pl.col("dur_ns").filter(_FORWARD).sum(), "sum"),
        "backward_ns": (pl.col("dur_ns").filter(_BACKWARD).sum(), "sum"),
    },
    "by_kernel": {
        "min_ns": (pl.col("dur_ns").min(), "min"),
        "max_ns": (pl.col("dur_ns").max(), "max"),
    },
}


def summarise(ops: pl.DataFrame, ranges: pl.DataFrame | None = None) -> Summaries:
    """All summary tables for an OPS frame.

    by_range needs the profile's nested ranges (`profile.ranges`); without
    them it is left empty.
    """
    return with_overlap(combine_summaries([partial_summaries(ops)], ranges), ops)


def with_overlap(summaries: Summaries, ops: pl.DataFrame | pl.LazyFrame) -> Summaries:
    """`summaries` with the communication overlap of `ops` (all of them at once)."""
    return replace(summaries, overlap=overlap_table(ops))


def with_waits(
    summaries: Summaries,
    ops: pl.DataFrame | pl.LazyFrame,
    api_calls: pl.DataFrame,
    ranges: pl.DataFrame,
    launches: pl.DataFrame | None = None,
) -> Summaries:
    """`summaries` with the waits tables of `ops` (nsysmap.waits: the profile's API
    calls give launch-call times and synchronisations, its ranges `.item()` calls;
    `launches` the launch-call times the attribution found, when given)."""
    return replace(summaries, waits=waits_tables(ops, api_calls, ranges, launches))


def partial_summaries(ops: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """Per table, the groups of `ops` with counts, sums, minima and maxima.

    Partial results of disjoint sets of ops combine into the summaries of
    their union (`combine_summaries`), so large profiles can be summarised
    block by block.
    """
    lazy = ops.lazy()
    queries = {
        name: lazy.group_by(["device_id", *keys]).agg(
            pl.len().cast(pl.Int64).alias("ops"),
            pl.col("dur_ns").sum().alias("time_ns"),
            *(expr.alias(col) for col, (expr, _) in EXTRA.get(name, {}).items()),
        )
        for name, keys in KEYS.items()
    }
    queries[LEAVES] = leaves_query(lazy)
    # Collected together: one pass of the engine over `ops` for every table.
    partial = dict(zip(queries, pl.collect_all(queries.values()), strict=True))
    return {**partial, LEAVES: conform_leaves(partial[LEAVES])}


def combine_summaries(
    parts: list[dict[str, pl.DataFrame]], ranges: pl.DataFrame | None = None
) -> Summaries:
    """The summary tables from the partial results of disjoint sets of ops.

    by_range needs the profile's nested ranges; without them it is left empty.
    """
    frames: dict[str, Any] = {}  # the table fields of Summaries (not `waits`)
    for name, keys in KEYS.items():
        how = {"sum": pl.Expr.sum, "min": pl.Expr.min, "max": pl.Expr.max}
        extra = {col: how[rule](pl.col(col)) for col, (_, rule) in EXTRA.get(name, {}).items()}
        # One part is already one row per group.
        grouped = (
            parts[0][name]
            if len(parts) == 1
            else pl.concat([part[name] for part in parts])
            .group_by(["device_id", *keys])
            .agg(
                pl.col("ops").sum(),
                pl.col("time_ns").sum(),
                *(e.alias(c) for c, e in extra.items()),
            )
        )
        frames[name] = _finished(grouped, keys, SUMMARY_SCHEMAS[name], name)
    frames["by_step"] = frames["by_step"].sort("device_id", "step", nulls_last=True)
    frames["by_module"] = _with_inclusive(frames["by_module"])
    frames["by_range"] = schemas.empty(schemas.BY_RANGE)
    if ranges is not None:
        frames["by_range"] = by_range(combine_leaves([part[LEAVES] for part in parts]), ranges)
    return Summaries(**frames)


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
