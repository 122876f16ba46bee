"""The one flow: read -> normalise -> attribute -> summarise -> write.

`load_report` and `write_analysis` are the only steps that touch files;
`analyse_report` in between is pure. Each step can be timed by a `Stages`
(which also shows progress on a terminal); `analyse_file` returns the
timings in `Analysis.timings`.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap.attribution.attribute import attribute
from nsysmap.attribution.normalise import normalise
from nsysmap.errors import InputNotFound, NoGpuData
from nsysmap.model import Report
from nsysmap.output.render import render_summary
from nsysmap.output.streamed import stream_ops
from nsysmap.output.summarize import Summaries, summarize
from nsysmap.output.writer import build_manifest, input_identity, output_tables, write_outputs
from nsysmap.stages import Stages

TRACE_SUFFIXES = (".json", ".json.gz")


# Reports with more GPU operations than this are attributed block by block and
# their ops written as they are made (nsysmap.output.streamed); Analysis.ops then
# reads ops.parquet back when asked for.
STREAM_OPS = 2_000_000


@dataclass(frozen=True)
class Analysis:
    """Everything one run of the flow produced."""

    report: Report
    held_ops: pl.DataFrame | None  # None: the ops were streamed to out_dir/ops.parquet
    summaries: Summaries
    manifest: dict[str, Any]
    summary_text: str
    out_dir: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage

    @property
    def ops(self) -> pl.DataFrame:
        """One OPS row per GPU operation (read from ops.parquet if it was streamed)."""
        if self.held_ops is not None:
            return self.held_ops
        return pl.read_parquet(Path(self.out_dir) / "ops.parquet")


def load_report(path: str | Path, *, stages: Stages | None = None) -> Report:
    """Read a report of any supported kind and normalise it.

    `.sqlite` nsys exports, `.nsys-rep` reports (exported with `nsys export`
    next to the input), and torch.profiler traces (`.json`, `.json.gz`).
    """
    path = Path(path)
    if not path.exists():
        raise InputNotFound(f"{path}: no such file")
    stages = stages or Stages(progress=False)
    with stages.stage("read", "reading"):
        raw = _read_raw(path)
    with stages.stage("normalise", "nesting ranges"):
        return normalise(raw)


def _read_raw(path: Path) -> Report:
    name = path.name.lower()
    if name.endswith(TRACE_SUFFIXES):
        from nsysmap.read.torch_trace import read_trace

        return read_trace(path)
    if name.endswith(".nsys-rep") or name.endswith(".qdrep"):
        from nsysmap.capture.nsys import export_sqlite

        path = export_sqlite(path, path.with_suffix(".sqlite"))
    from nsysmap.read.nsys_sqlite import read_sqlite

    return read_sqlite(path)


def analyse_report(
    report: Report,
    *,
    options: dict[str, Any] | None = None,
    source: dict[str, Any] | None = None,
    stages: Stages | None = None,
) -> Analysis:
    """Attribute and summarise a normalised report (pure: no file access)."""
    _require_ops(report)
    stages = stages or Stages(progress=False)
    with stages.stage("attribute", "attributing"):
        ops = attribute(report)
    with stages.stage("summarise", "summarising"):
        summaries = summarize(ops)
    return _analysis(report, ops, ops.height, summaries, options, source)


def _require_ops(report: Report) -> None:
    if report.gpu_ops.is_empty():
        where = report.meta_value("source_path") or "report"
        raise NoGpuData(f"{where}: no GPU operations to attribute")


def _analysis(
    report: Report,
    ops: pl.DataFrame | None,
    n_ops: int,
    summaries: Summaries,
    options: dict[str, Any] | None,
    source: dict[str, Any] | None,
    out_dir: Path | None = None,
) -> Analysis:
    tables = {"ops": ops if ops is not None else n_ops, **summaries.tables()}
    manifest = build_manifest(report, tables, options=options or {}, source=source)
    meta = dict(zip(report.meta["key"], report.meta["value"], strict=True))
    text = render_summary(summaries, meta)
    return Analysis(report, ops, summaries, manifest, text, out_dir)


def _streamed(
    report: Report, out_dir: Path, options: dict[str, Any] | None, stages: Stages
) -> Analysis:
    """Attribute, summarise and write ops.parquet block by block (large reports)."""
    _require_ops(report)
    n_ops, summaries = stream_ops(report, out_dir / "ops.parquet", stages)
    return _analysis(report, None, n_ops, summaries, options, None, out_dir)


def write_analysis(analysis: Analysis, out_dir: Path, *, stages: Stages | None = None) -> Analysis:
    """Write the Parquet tables and manifest; returns the analysis with `out_dir` set."""
    stages = stages or Stages(progress=False)
    with stages.stage("write", "writing"):
        if analysis.held_ops is None and analysis.out_dir == out_dir:
            tables = analysis.summaries.tables()  # ops.parquet was streamed there
        else:
            tables = output_tables(analysis.ops, analysis.summaries)
        write_outputs(tables, analysis.manifest, out_dir)
    return replace(analysis, out_dir=out_dir, timings={**analysis.timings, **stages.timings})


def analyse(
    report: Report,
    out_dir: Path,
    *,
    options: dict[str, Any] | None = None,
    input_path: Path | None = None,
    stages: Stages | None = None,
) -> Analysis:
    """Attribute, summarise and write: the whole flow after reading."""
    source = input_identity(input_path) if input_path is not None else None
    analysis = analyse_report(report, options=options, source=source, stages=stages)
    return write_analysis(analysis, Path(out_dir), stages=stages)


def analyse_file(
    path: str | Path,
    out_dir: str | Path,
    *,
    options: dict[str, Any] | None = None,
    stages: Stages | None = None,
) -> Analysis:
    """`nsysmap attribute`: the whole flow from a file.

    The input's SHA-256 (for the manifest) is computed in a background
    thread while the report is attributed; `timings` gets its duration as
    "hash" (mostly off the critical path). Progress shows on
    stderr when it is a terminal, unless `stages` says otherwise.
    """
    path = Path(path)
    stages = stages or Stages()
    stop = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        try:
            report = load_report(path, stages=stages)
            # Hashed beside attribution (reading keeps both cores busy already).
            identity = pool.submit(_timed_identity, path, stop)
            if report.gpu_ops.height > STREAM_OPS:
                analysis = _streamed(report, Path(out_dir), options, stages)
            else:
                analysis = analyse_report(report, options=options, stages=stages)
        except BaseException:
            stop.set()  # do not make a failure wait for the hash
            raise
        source, hash_s = identity.result()
    manifest = {**analysis.manifest, "input": source}
    analysis = replace(analysis, manifest=manifest, timings={**stages.timings, "hash": hash_s})
    return write_analysis(analysis, Path(out_dir), stages=stages)


def _timed_identity(path: Path, stop: threading.Event) -> tuple[dict[str, Any], float]:
    start = time.perf_counter()
    return input_identity(path, stop), time.perf_counter() - start
