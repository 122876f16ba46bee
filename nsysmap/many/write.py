"""Several reports' outputs, through the one writer (nsysmap.output.writer).

The layout is one report's, with ranks: the operations form one
Hive-partitioned Parquet dataset, `OUT/ops/rank=N/part-0.parquet` (the rank
is in the path, not in the files), which Polars, pandas, PyArrow and DuckDB
read as one table with a `rank` column. Each part is moved there from the
work directory its worker wrote it to (`RankParts`), so the operations are
written once. What this module adds to the writer is only what several
reports have and one has not: the parts, and the manifest's inputs,
cluster and rank rule.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap._version import __version__
from nsysmap.core import schemas
from nsysmap.many.rank_ids import RankOf
from nsysmap.many.task import Outcome
from nsysmap.output.ownership import WORK_DIR
from nsysmap.output.writer import MANIFEST_SCHEMA, OPS_DIR, RANKS_LAYOUT, table_entries

PART = "part-0.parquet"
LAYOUT = RANKS_LAYOUT  # the manifest's `layout` for several reports


def rank_dir(out_dir: Path, rank: int) -> Path:
    """The Hive partition of rank `rank`."""
    return out_dir / OPS_DIR / f"rank={rank}"


def clear_previous(out_dir: Path) -> None:
    """Remove the work folder an earlier, interrupted run left in `out_dir` (its outputs
    stay until the new ones replace them: nsysmap.output.placement)."""
    shutil.rmtree(out_dir / WORK_DIR, ignore_errors=True)


@dataclass(frozen=True)
class RankParts:
    """The operations of several ranks, each in the part its worker wrote
    (nsysmap.output.writer.PlacesOps): placed by moving each into its partition."""

    ranks: Sequence[RankOf]

    @property
    def rows(self) -> int:
        return sum(r.unit.ops for r in self.ranks)

    def place(self, folder: Path) -> None:
        for r in self.ranks:
            target = rank_dir(folder, r.rank)
            target.mkdir(parents=True, exist_ok=True)
            shutil.move(r.unit.part, target / PART)  # renamed; copied across file systems


def ranks_manifest(
    outcomes: Sequence[Outcome],
    ranks: Sequence[RankOf],
    tables: dict[str, pl.DataFrame],
    *,
    rank_rule: str,
    options: dict[str, Any],
    cluster: dict[str, Any],
) -> dict[str, Any]:
    """The manifest of several reports: versions, the cluster, every input with its
    status and ranks, and the tables (the writer's entries, `ops` a dataset)."""
    ranks_of: dict[int, list[int]] = {}
    for r in ranks:
        ranks_of.setdefault(r.index, []).append(r.rank)
    listed = table_entries({"ops": RankParts(ranks).rows, **tables}, ranked=True)
    return {
        "schema": MANIFEST_SCHEMA,
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
            "devices": [
                {"device_id": device, "name": name}
                for device, name in sorted(o.device_names.items())
            ],
        }
    else:
        entry |= {"error": o.error, "exit_code": o.exit_code}
    return entry
