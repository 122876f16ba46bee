"""`nsysmap report` on a multi-rank output directory: the cross-rank section.

The single-report answers (FLOPs, MFU, shapes) need one report's operations;
on a multi-rank output `nsysmap report` writes the cross-rank section of
nsysmap.many.ranks_text instead, from the tables `nsysmap attribute` wrote,
and the exposed communication per collective and rank, from its operations
(nsysmap.many.rank_collectives).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap.core.errors import NotAnOutput
from nsysmap.core.inert import markdown_code
from nsysmap.many.rank_collectives import collectives_section
from nsysmap.many.ranks_text import findings, markdown_section
from nsysmap.many.write import LAYOUT
from nsysmap.output.read_back import whole
from nsysmap.output.writer import MANIFEST
from nsysmap.report.fix_first import fix_first_answer, fix_first_section, read_findings

NEEDED = ("rank_comm", "stragglers", "rank_module_phase", "rank_module")
# The steps the answers name, and the ranks' operations (the warm-up left out is the
# difference with rank_comm's), when the output has them.
OPTIONAL = ("rank_steps", "ranks")


def is_multi_rank(run_dir: Path) -> bool:
    """Is `run_dir` the output of `nsysmap attribute` on several reports?"""
    try:
        manifest = json.loads((Path(run_dir) / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("layout") == LAYOUT


def rank_report(run_dir: Path) -> str:
    """The Markdown report of a multi-rank output directory (its manifest and tables
    of one set: nsysmap.output.read_back)."""
    manifest, tables = whole(run_dir, lambda: _read(run_dir))
    title = f"# nsysmap report: {markdown_code(run_dir.name)}\n\n"
    ranks = [int(r) for r in tables["rank_comm"]["rank"]]
    fix_first = "\n".join(fix_first_section(fix_first_answer(tables.get("findings"))))
    section = markdown_section(findings(manifest, tables))
    whole_rank = (
        "Each rank's whole report (phases, layers, kernels, FLOPs, waits): "
        f"{markdown_code(f'nsysmap report {run_dir} --rank R')}.\n"
    )
    collectives = collectives_section(run_dir, ranks, manifest.get("output_schema_version"))
    return f"{title}{fix_first}\n{section}\n{collectives}\n{whole_rank}"


def _read(run_dir: Path) -> tuple[dict[str, Any], dict[str, pl.DataFrame]]:
    manifest: dict[str, Any] = json.loads((run_dir / MANIFEST).read_text())
    try:
        tables = {name: pl.read_parquet(run_dir / f"{name}.parquet") for name in NEEDED}
        tables |= {
            name: pl.read_parquet(run_dir / f"{name}.parquet")
            for name in OPTIONAL
            if (run_dir / f"{name}.parquet").is_file()
        }
        found = read_findings(run_dir, manifest)  # None: written before findings.parquet
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise NotAnOutput(f"{run_dir}: unreadable multi-rank table: {exc}") from exc
    return manifest, tables if found is None else {**tables, "findings": found}
