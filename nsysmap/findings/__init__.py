"""What to fix first: findings with their evidence, estimated saving and fix, ranked.

Computed from the tables nsysmap writes (ops, launch_cost, idle; the
cross-rank tables of several reports) by the rules of
nsysmap.findings.rules, ranked by estimated saving per step with each
nanosecond counted once (nsysmap.findings.rank), and written as
findings.parquet (schema FINDINGS, docs/outputs.md); docs/findings.md
explains every rule, its thresholds and its estimate.
"""

from nsysmap.findings.find import findings_table
from nsysmap.findings.inputs import Inputs, job_inputs

__all__ = ["Inputs", "findings_table", "job_inputs"]
