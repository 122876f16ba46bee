"""The one flow: read -> normalise -> attribute -> summarise -> write.

`load_report` and `write_analysis` are the only steps that touch files;
`analyse_report` in between is pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap.attribute import attribute
from nsysmap.errors import InputNotFound, NoGpuData
from nsysmap.model import Report
from nsysmap.normalise import normalise
from nsysmap.render import render_summary
from nsysmap.summarize import Summaries, summarize
from nsysmap.writer import build_manifest, input_identity, output_tables, write_outputs

TRACE_SUFFIXES = (".json", ".json.gz")


@dataclass(frozen=True)
class Analysis:
    """Everything one run of the flow produced."""

    report: Report
    ops: pl.DataFrame
    summaries: Summaries
    manifest: dict[str, Any]
    summary_text: str
    out_dir: Path | None = None


def load_report(path: str | Path) -> Report:
    """Read a report of any supported kind and normalise it.

    `.sqlite` nsys exports, `.nsys-rep` reports (exported with `nsys export`
    next to the input), and torch.profiler traces (`.json`, `.json.gz`).
    """
    path = Path(path)
    if not path.exists():
        raise InputNotFound(f"{path}: no such file")
    return normalise(_read_raw(path))


def _read_raw(path: Path) -> Report:
    name = path.name.lower()
    if name.endswith(TRACE_SUFFIXES):
        from nsysmap.torch_trace import read_trace

        return read_trace(path)
    if name.endswith(".nsys-rep") or name.endswith(".qdrep"):
        from nsysmap.nsys_tool import export_sqlite

        path = export_sqlite(path, path.with_suffix(".sqlite"))
    from nsysmap.reader import read_sqlite

    return read_sqlite(path)


def analyse_report(
    report: Report, *, options: dict[str, Any] | None = None, source: dict[str, Any] | None = None
) -> Analysis:
    """Attribute and summarise a normalised report (pure: no file access)."""
    if report.gpu_ops.is_empty():
        where = report.meta_value("source_path") or "report"
        raise NoGpuData(f"{where}: no GPU operations to attribute")
    ops = attribute(report)
    summaries = summarize(ops)
    tables = output_tables(ops, summaries)
    manifest = build_manifest(report, tables, options=options or {}, source=source)
    meta = dict(zip(report.meta["key"], report.meta["value"], strict=True))
    return Analysis(report, ops, summaries, manifest, render_summary(summaries, meta))


def write_analysis(analysis: Analysis, out_dir: Path) -> Analysis:
    """Write the Parquet tables and manifest; returns the analysis with `out_dir` set."""
    write_outputs(output_tables(analysis.ops, analysis.summaries), analysis.manifest, out_dir)
    return Analysis(
        analysis.report,
        analysis.ops,
        analysis.summaries,
        analysis.manifest,
        analysis.summary_text,
        out_dir,
    )


def analyse(
    report: Report,
    out_dir: Path,
    *,
    options: dict[str, Any] | None = None,
    input_path: Path | None = None,
) -> Analysis:
    """Attribute, summarise and write: the whole flow after reading."""
    source = input_identity(input_path) if input_path is not None else None
    analysis = analyse_report(report, options=options, source=source)
    return write_analysis(analysis, Path(out_dir))


def analyse_file(
    path: str | Path, out_dir: str | Path, *, options: dict[str, Any] | None = None
) -> Analysis:
    """`nsysmap attribute`: the whole flow from a file."""
    path = Path(path)
    return analyse(load_report(path), Path(out_dir), options=options, input_path=path)
