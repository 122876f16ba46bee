"""What to fix first: findings with their evidence, estimated saving and fix, ranked.

Computed from the tables nsysmap writes (ops, launch_cost, idle; the
cross-rank tables of several reports) by the rules of
nsysmap.findings.rule_table, ranked by estimated saving per step with each
nanosecond counted once (nsysmap.findings.rank), and written as
findings.parquet (schema FINDINGS, docs/outputs.md); docs/findings.md
explains every rule, its thresholds and its estimate.
"""

import polars as pl

from nsysmap.findings.find import findings_table
from nsysmap.findings.inputs import Inputs, job_inputs

__all__ = ["Inputs", "findings_table", "job_inputs", "process_findings"]


def process_findings(
    ops: pl.LazyFrame, waits: dict[str, pl.DataFrame], devices: pl.DataFrame, meta: dict[str, str]
) -> pl.DataFrame:
    """findings.parquet of one profile: its OPS rows, waits tables, devices and meta."""
    cpu = meta.get("unit_of_work") == "cpu_op"
    return findings_table([Inputs(ops, waits["launch_cost"], waits["idle"], devices, cpu)])
