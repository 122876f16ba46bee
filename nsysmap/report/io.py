"""Reading an analysis directory for `nsysmap report`, and writing the report next to it."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from nsysmap.errors import InputNotFound, NotAnExport
from nsysmap.flops.model import load_flops, load_flops_description
from nsysmap.output.writer import MANIFEST
from nsysmap.report.answers import ReportResult, RunData
from nsysmap.schemas import OPS, SchemaMismatch, conform

REPORT_MD = "report.md"


def read_run(run_dir: str | Path) -> RunData:
    """The ops table, manifest and model FLOPs of an `attribute` / `run` output directory."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputNotFound(f"{run_dir}: no such directory")
    try:
        manifest = json.loads((run_dir / MANIFEST).read_text())
        ops_file = manifest["tables"]["ops"]["file"]
    except FileNotFoundError as exc:
        raise InputNotFound(
            f"{run_dir}: no {MANIFEST}; give the output directory of nsysmap attribute or run"
        ) from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise NotAnExport(f"{run_dir / MANIFEST}: not an nsysmap manifest") from exc
    try:
        ops = conform(pl.read_parquet(run_dir / ops_file), OPS, "ops")
    except SchemaMismatch as exc:
        raise NotAnExport(f"{run_dir / ops_file}: not an ops table of this nsysmap") from exc
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise NotAnExport(f"{run_dir / ops_file}: unreadable ops table: {exc}") from exc
    return RunData(
        label=str(run_dir),
        ops=ops,
        manifest=manifest,
        model_flops=load_flops(run_dir),
        model_info=load_flops_description(run_dir, manifest),
    )


def write_report(result: ReportResult, out_dir: Path, markdown: Path | None = None) -> Path:
    """Write every report table as Parquet into `out_dir`, and the Markdown; returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, frame in result.tables.items():
        frame.write_parquet(out_dir / f"{name}.parquet", statistics=True)
    target = markdown or out_dir / REPORT_MD
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(result.markdown)
    return target
