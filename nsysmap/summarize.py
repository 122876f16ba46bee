"""Summary tables over attributed operations (pure: ops frame in, frames out).

Every summary is per device and keeps null groups (time that could not be
given a phase, module, ...), so each table's `time_ns` adds up to the
device's total and `time_share` to 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from nsysmap import schemas

COVERAGE = pl.Schema(
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
}


def summarize(ops: pl.DataFrame) -> Summaries:
    """All summary tables for an OPS frame."""
    backward = pl.col("direction") == "backward"
    forward = pl.col("direction") == "forward"
    extra = {
        "by_step": [
            pl.col("start_ns").min().alias("first_start_ns"),
            pl.col("end_ns").max().alias("last_end_ns"),
        ],
        "by_module": [
            pl.col("dur_ns").filter(forward).sum().alias("forward_ns"),
            pl.col("dur_ns").filter(backward).sum().alias("backward_ns"),
            pl.lit(0, pl.Int64).alias("inclusive_ns"),
        ],
        "by_kernel": [
            pl.col("dur_ns").mean().alias("mean_ns"),
            pl.col("dur_ns").min().alias("min_ns"),
            pl.col("dur_ns").max().alias("max_ns"),
        ],
    }
    keys = {
        "coverage": ["attribution"],
        "by_phase": ["phase"],
        "by_step": ["step"],
        "by_module": ["module", "module_class"],
        "by_module_phase": ["module", "module_class", "phase"],
        "by_kernel": ["kind", "name", "short_name", "category"],
        "by_category": ["category"],
    }
    frames = {
        name: _grouped(ops, keys[name], extra.get(name, []), SUMMARY_SCHEMAS[name], name)
        for name in SUMMARY_SCHEMAS
    }
    frames["by_step"] = frames["by_step"].sort("device_id", "step", nulls_last=True)
    frames["by_module"] = _with_inclusive(frames["by_module"])
    return Summaries(**frames)


def _grouped(
    ops: pl.DataFrame, keys: list[str], extra: list[pl.Expr], schema: pl.Schema, table: str
) -> pl.DataFrame:
    """Group by device + keys; ops, time and share of the device's time, largest first."""
    device_total = pl.col("time_ns").sum().over("device_id")
    grouped = (
        ops.group_by(["device_id", *keys])
        .agg(pl.len().alias("ops"), pl.col("dur_ns").sum().alias("time_ns"), *extra)
        .with_columns(
            pl.when(device_total > 0)
            .then(pl.col("time_ns") / device_total)
            .otherwise(0.0)
            .alias("time_share")
        )
        .sort(
            ["device_id", "time_ns", *keys],
            descending=[False, True, *[False] * len(keys)],
            nulls_last=True,
        )
    )
    return schemas.conform(grouped.select(schema.names()), schema, table)


def _with_inclusive(by_module: pl.DataFrame) -> pl.DataFrame:
    """Fill `inclusive_ns`: a module's own time plus that of every module under it.

    "transformer.h.0" includes "transformer.h.0.attn.c_attn"; the root module
    ("") includes every module. Computed over the distinct module paths.
    """
    own = by_module.filter(pl.col("module").is_not_null()).select("device_id", "module", "time_ns")
    pairs = own.rename({"module": "inner", "time_ns": "inner_ns"}).join(
        own.select("device_id", pl.col("module").alias("outer")).unique(), on="device_id"
    )
    covers = (
        (pl.col("outer") == "")
        | (pl.col("inner") == pl.col("outer"))
        | pl.col("inner").str.starts_with(pl.col("outer") + ".")
    )
    inclusive = (
        pairs.filter(covers)
        .group_by("device_id", "outer")
        .agg(pl.col("inner_ns").sum().alias("incl"))
        .rename({"outer": "module"})
    )
    out = by_module.join(inclusive, on=["device_id", "module"], how="left", nulls_equal=False)
    out = out.with_columns(pl.coalesce("incl", "time_ns").alias("inclusive_ns")).drop("incl")
    return out.select(by_module.columns)
