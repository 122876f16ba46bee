"""The findings' inputs read back from an output directory (one report, or several ranks)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from nsysmap.core.schemas import conform
from nsysmap.core.wait_schemas import IDLE, LAUNCH_COST
from nsysmap.findings.inputs import Inputs, job_inputs

ACROSS = ("rank_steps", "stragglers", "rank_module_phase")


def output_inputs(out_dir: Path) -> list[Inputs]:
    """The inputs of an output directory: its one process, or every rank and the job."""
    manifest = json.loads((out_dir / "manifest.json").read_text())
    tables = manifest["tables"]
    devices = pl.DataFrame(manifest.get("devices") or [])
    cpu = (manifest.get("report_meta") or {}).get("unit_of_work") == "cpu_op"
    waits = {name: _table(out_dir, tables, name) for name in ("launch_cost", "idle")}
    if "dir" not in tables["ops"]:
        ops = pl.scan_parquet(out_dir / tables["ops"]["file"])
        return [
            Inputs(
                ops,
                _waits(waits["launch_cost"], LAUNCH_COST),
                _waits(waits["idle"], IDLE),
                devices,
                cpu,
            )
        ]
    ops = pl.scan_parquet(out_dir / tables["ops"]["dir"], hive_partitioning=True)
    ranks = sorted(ops.select(pl.col("rank").unique()).collect()["rank"].to_list())
    per_rank = tuple(
        Inputs(
            ops.filter(pl.col("rank") == r),
            _waits(_of(waits["launch_cost"], r), LAUNCH_COST),
            _waits(_of(waits["idle"], r), IDLE),
            devices,
            cpu,
            rank=r,
        )
        for r in ranks
    )
    across = {
        name: pl.read_parquet(out_dir / tables[name]["file"]) for name in ACROSS if name in tables
    }
    return [*per_rank, job_inputs(across, per_rank)]


def _table(out_dir: Path, tables: dict, name: str) -> pl.DataFrame | None:
    entry = tables.get(name)
    return pl.read_parquet(out_dir / entry["file"]) if entry else None


def _of(table: pl.DataFrame | None, rank: int) -> pl.DataFrame | None:
    return None if table is None else table.filter(pl.col("rank") == rank).drop("rank")


def _waits(table: pl.DataFrame | None, schema: pl.Schema) -> pl.DataFrame:
    """A waits table in its schema (empty where the output has none: before schema 1.6)."""
    return pl.DataFrame(schema=schema) if table is None else conform(table, schema, "waits")
