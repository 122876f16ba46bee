"""One analysed run as `nsysmap report` reads it, from an Analysis in memory (no files)."""

from __future__ import annotations

from typing import Any

from nsysmap.flow.analysis import Analysis
from nsysmap.report.answers import RunData


def run_data(
    analysis: Analysis,
    label: str = "run",
    *,
    manifest: dict[str, Any] | None = None,
    waits: bool = False,
) -> RunData:
    """The RunData of `analysis`: its operations, manifest, by_range and structure (and its
    waits tables with `waits`), as `read_run` would read them from its output directory."""
    return RunData(
        label,
        analysis.ops,
        manifest if manifest is not None else analysis.manifest,
        by_range=analysis.summaries.by_range,
        waits=analysis.summaries.waits if waits else None,
        structure=analysis.structure,
    )
