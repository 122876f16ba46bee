"""`nsysmap report`: the answers (nsysmap.report.answers) and their Markdown, together."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import polars as pl

from nsysmap.report.answer_doc import answers_document
from nsysmap.report.answers import (
    FLOP_SOURCES,
    Findings,
    ReportOptions,
    RunData,
    analyse_run,
    compare_notes,
    summary_rows,
)
from nsysmap.report.markdown import render


@dataclass(frozen=True)
class ReportResult:
    """The report's tables (name -> frame) and its Markdown text."""

    tables: dict[str, pl.DataFrame]
    markdown: str
    findings: Findings  # its `answers` is answers.json
    compare: Findings | None = None

    @property
    def answers(self) -> dict[str, Any]:
        """answers.json: the report's answers as data."""
        return self.findings.answers


def build_report(
    main: RunData, compare: RunData | None = None, options: ReportOptions | None = None
) -> ReportResult:
    """All report tables and the Markdown for `main` (and a `compare` run, typically
    forward-only: the report says what it is)."""
    options = options or ReportOptions()
    if options.flops not in FLOP_SOURCES:
        raise ValueError(f"flops must be one of {FLOP_SOURCES}")
    f = analyse_run(main, options)
    c = analyse_run(compare, options, "compare") if compare is not None else None
    if c is not None:
        c = replace(c, notes=compare_notes(c))
    summary = [summary_rows(f, "main")] + ([summary_rows(c, "compare")] if c else [])
    top = [f.top] + ([c.top] if c else [])
    tables = {
        "report_summary": pl.concat(summary),
        "report_devices": f.devices,
        "report_module_phase": f.module_phase,
        "report_layers": f.layers,
        "report_blocks": f.blocks,
        "report_phases": f.phases,
        "report_category": f.categories,
        "report_top_kernels": pl.concat(top),
        "report_non_matmul": f.non_matmul,
        "report_shapes": f.shapes,
    }
    if f.ranges is not None:
        tables["report_ranges"] = f.ranges
    f = replace(f, answers=answers_document(f, c))
    return ReportResult(tables, render(f.answers, options.show_shapes), f, c)
