"""Writing several reports' outputs: the ops dataset, the tables and the manifest.

The operations form one Hive-partitioned Parquet dataset,
`OUT/ops/rank=N/part-0.parquet` (the rank is in the path, not in the files),
which Polars, pandas, PyArrow and DuckDB read as one table with a `rank`
column. Each part is moved there from the work directory its worker wrote
it to, so the operations are written once.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap import schemas
from nsysmap._version import __version__
from nsysmap.many.rank_ids import RankOf
from nsysmap.many.task import Outcome
from nsysmap.output.writer import MANIFEST, PARQUET

OPS_DIR = "ops"
PART = "part-0.parquet"
WORK_DIR = ".nsysmap-work"  # per-report work directories, removed at the end
LAYOUT = "ranks"  # the manifest's `layout` for several reports


def rank_dir(out_dir: Path, rank: int) -> Path:
    """The Hive partition of rank `rank`."""
    return out_dir / OPS_DIR / f"rank={rank}"


def clear_previous(out_dir: Path) -> None:
    """Remove rank partitions and work left in `out_dir` by an earlier run."""
    ops = out_dir / OPS_DIR
    if ops.is_dir():
        for part in ops.glob("rank=*"):
            if part.is_dir():
                shutil.rmtree(part)
    shutil.rmtree(out_dir / WORK_DIR, ignore_errors=True)


def place_ops(out_dir: Path, ranks: Sequence[RankOf]) -> None:
    """Move each rank's operations into its partition."""
    for r in ranks:
        target = rank_dir(out_dir, r.rank)
        target.mkdir(parents=True, exist_ok=True)
        os.replace(r.unit.part, target / PART)


def write_tables(out_dir: Path, tables: dict[str, pl.DataFrame]) -> None:
    for name, frame in tables.items():
        frame.write_parquet(out_dir / f"{name}.parquet", **PARQUET)


def ranks_manifest(
    outcomes: Sequence[Outcome],
    ranks: Sequence[RankOf],
    tables: dict[str, pl.DataFrame],
    *,
    rank_rule: str,
    options: dict[str, Any],
    cluster: dict[str, Any],
) -> dict[str, Any]:
    """The manifest of several reports (not `output.writer.build_manifest`, one
    report's): versions, the cluster, every input with its status and ranks, the tables."""
    ranks_of: dict[int, list[int]] = {}
    for r in ranks:
        ranks_of.setdefault(r.index, []).append(r.rank)
    n_ops = sum(r.unit.ops for r in ranks)
    listed = {
        OPS_DIR: {"dir": OPS_DIR, "partitioning": "hive", "key": "rank", "rows": n_ops},
        **{name: {"file": f"{name}.parquet", "rows": f.height} for name, f in tables.items()},
    }
    return {
        "nsysmap_version": __version__,
        "output_schema_version": schemas.OUTPUT_SCHEMA_VERSION,
        "layout": LAYOUT,
        "options": options,
        "cluster": cluster,
        "rank_rule": rank_rule,
        "reports": len(outcomes),
        "failed": sum(o.status != "ok" for o in outcomes),
        "inputs": [_input_entry(o, ranks_of.get(o.index, [])) for o in outcomes],
        "tables": listed,
    }


def _input_entry(o: Outcome, ranks: list[int]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "path": o.path,
        "status": o.status,
        "ranks": ranks,
        "seconds": round(o.seconds, 3),
        "worker": o.worker,
        "worker_peak_rss_bytes": o.worker_peak_rss_bytes,
    }
    if o.status == "ok":
        entry |= {
            "size_bytes": o.source.get("size_bytes"),
            "sha256": o.source.get("sha256"),
            "backend": o.meta.get("backend"),
            "report_meta": o.meta,
        }
    else:
        entry |= {"error": o.error, "exit_code": o.exit_code}
    return entry


def write_manifest(out_dir: Path, manifest: dict[str, Any]) -> None:
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
