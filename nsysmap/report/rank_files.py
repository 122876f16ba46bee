"""One rank of a multi-rank output as a single run, for `nsysmap report DIR --rank R`.

A multi-rank output (`nsysmap run` on distributed training, `nsysmap attribute`
of several reports) holds each rank's operations (`ops/rank=R/`) and summary,
waits and findings tables with a `rank` column; `read_rank_run` reads rank R's
share of them as the `RunData` that `nsysmap report` reads from a one-run
folder, so that every single-run answer (phases, layers, kernels, FLOPs and
MFU, waits, what to fix first) is given for that rank::

    OUT/ops/rank=1/             -> ops (rank 1's operations)
    OUT/by_range.parquet        -> by_range     rank == 1, the column dropped
    OUT/{idle,stream_idle,launch_cost}.parquet -> waits
    OUT/findings.parquet        -> findings     rank 1's, numbered again
    OUT/capture/rank1/flops.json -> the model's FLOPs (under `nsysmap run`)

The job keeps no structure per rank: the report finds it from the rank's
operations, as for a folder written without one, and says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from instrument.contract import CAPTURE_DIR, rank_dir
from instrument.contract import FLOPS as FLOPS_JSON
from nsysmap.core.errors import ExitCode, NotAnOutput, NsysmapError
from nsysmap.core.schemas import BY_RANGE, OPS, conform
from nsysmap.flops.flops_document import describe, read_document
from nsysmap.flops.module_flops import flops_table
from nsysmap.output.read_back import whole
from nsysmap.output.writer import MANIFEST, OPS_DIR
from nsysmap.report.answers import RunData
from nsysmap.report.fix_first import read_findings
from nsysmap.report.waits import read_waits

STRUCTURE_NOTE = (
    "A multi-rank output keeps no structure per rank: the structure was found from this "
    "rank's operations and their innermost ranges alone."
)


class NoSuchRank(NsysmapError):
    """`--rank R` names a rank the output does not hold."""

    exit_code = ExitCode.USAGE


def read_rank_run(run_dir: Path, rank: int) -> RunData:
    """Rank `rank` of the multi-rank output `run_dir` as a single run (see the module);
    NoSuchRank (exit 2) when it holds no such rank."""
    return whole(run_dir, lambda: _read(Path(run_dir), rank))


def _read(run_dir: Path, rank: int) -> RunData:
    manifest: dict[str, Any] = json.loads((run_dir / MANIFEST).read_text())
    report = _report_of(manifest, rank, run_dir)
    ops = _ops(run_dir, rank)
    doc = read_document(rank_dir(run_dir / CAPTURE_DIR, rank) / FLOPS_JSON)
    return RunData(
        label=f"{run_dir} rank {rank}",
        ops=ops,
        manifest={
            "backend": report.get("backend"),
            "report_meta": report.get("report_meta") or {},
            "devices": report.get("devices") or [],  # the GPUs' names (their peaks)
            "options": manifest.get("options") or {},
        },
        model_flops=None if doc is None else flops_table(doc),
        model_info=None if doc is None else describe(doc),
        by_range=_by_range(run_dir, rank),
        waits=_waits(run_dir, manifest, rank),
        structure=None,
        structure_note=STRUCTURE_NOTE,
        findings=_findings(run_dir, manifest, rank),
    )


def _report_of(manifest: dict[str, Any], rank: int, run_dir: Path) -> dict[str, Any]:
    """The manifest's entry of the report that holds `rank` (NoSuchRank when none)."""
    reports = [r for r in manifest.get("inputs") or [] if isinstance(r, dict)]
    for report in reports:
        if rank in (report.get("ranks") or []):
            return report
    held = sorted({r for report in reports for r in report.get("ranks") or []})
    said = ", ".join(str(r) for r in held) or "none"
    raise NoSuchRank(f"{run_dir}: holds no rank {rank} (its ranks: {said})")


def _ops(run_dir: Path, rank: int) -> pl.DataFrame:
    """Rank `rank`'s operations, with their rank (the dataset's key is not in its files)."""
    folder = run_dir / OPS_DIR / f"rank={rank}"
    files = sorted(folder.glob("*.parquet"))
    if not files:
        raise NotAnOutput(f"{folder}: no operations of rank {rank} in this output")
    frame = pl.concat([pl.read_parquet(f) for f in files], how="vertical_relaxed")
    return conform(frame.with_columns(rank=pl.lit(rank, pl.Int64)), OPS, "ops")


def _by_range(run_dir: Path, rank: int) -> pl.DataFrame | None:
    """Rank `rank`'s by_range rows (None: not written)."""
    path = run_dir / "by_range.parquet"
    if not path.is_file():
        return None
    return conform(_of_rank(pl.read_parquet(path), rank), BY_RANGE, "by_range")


def _of_rank(frame: pl.DataFrame, rank: int) -> pl.DataFrame:
    """`frame`'s rows of `rank`, without the rank column."""
    return frame.filter(pl.col("rank") == rank).drop("rank")


def _waits(run_dir: Path, manifest: dict[str, Any], rank: int) -> dict[str, pl.DataFrame] | None:
    """The waits tables of `rank` (None when the output has none)."""
    tables = read_waits(run_dir, manifest)
    if tables is None:
        return None
    return {name: _of_rank(frame, rank) for name, frame in tables.items()}


def _findings(run_dir: Path, manifest: dict[str, Any], rank: int) -> pl.DataFrame | None:
    """Rank `rank`'s findings (and the job's own, with no rank), numbered again from 1."""
    every = read_findings(run_dir, manifest)
    if every is None:
        return None
    mine = every.filter(pl.col("rank").is_null() | (pl.col("rank") == rank)).sort("priority")
    return mine.with_columns(priority=pl.int_range(1, pl.len() + 1, dtype=pl.Int64))
