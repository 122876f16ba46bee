"""What to fix first: findings with their evidence, estimated saving and fix, ranked.

Computed from the tables nsysmap writes (ops, launch_cost, idle; the
cross-rank tables of several reports) by the rules of
nsysmap.findings.rule_table, ranked by estimated saving per step with each
nanosecond counted once (nsysmap.findings.rank), and written as
findings.parquet (schema FINDINGS, docs/outputs.md); docs/findings.md
explains every rule, its thresholds and its estimate.
"""

import time
from dataclasses import replace

import polars as pl

from nsysmap.core.units import cpu_trace
from nsysmap.findings.find import findings_table
from nsysmap.findings.inputs import Inputs, job_inputs
from nsysmap.flow.analysis import Analysis, with_tables

__all__ = ["Inputs", "findings_table", "job_inputs", "process_findings", "with_findings"]

TABLE = "findings"


def process_findings(
    ops: pl.LazyFrame,
    waits: dict[str, pl.DataFrame],
    devices: pl.DataFrame,
    meta: dict[str, str],
    structure: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """findings.parquet of one profile: its OPS rows, waits tables, devices, meta and
    structure (None: not found)."""
    cpu = cpu_trace(meta)
    x = Inputs(ops, waits["launch_cost"], waits["idle"], devices, cpu, structure=structure)
    return findings_table([x])


def with_findings(analysis: Analysis) -> Analysis:
    """`analysis` with its findings: findings.parquet to be written with it (and listed in
    its manifest), `Analysis.findings` for the terminal summary, their seconds in
    `timings` ("findings"). `nsysmap attribute` and `nsysmap run` add them before the write."""
    start = time.perf_counter()
    meta = dict(zip(analysis.profile.meta["key"], analysis.profile.meta["value"], strict=True))
    waits = analysis.summaries.waits
    devices = analysis.profile.devices
    table = process_findings(analysis.store.scan(), waits, devices, meta, analysis.structure)
    seconds = time.perf_counter() - start
    added = with_tables(analysis, {TABLE: table})
    return replace(added, findings=table, timings={**added.timings, TABLE: seconds})
