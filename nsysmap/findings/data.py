"""Rule data_wait: the GPU waiting for the next batch at the start of each step.

Between two consecutive steps the GPU is idle from the last operation of one
to the first of the next. Where that next operation is data work (phase
`data`: the batch copied to the GPU), the host was getting the batch ready
meanwhile; the data phase's own launch and synchronisation gaps (the batch's
copies waiting to be issued) add to it. A profile without steps (neither
step ranges nor steps of the structure, nsysmap.findings.inputs), or without
a data phase, cannot tell loading from other host work between steps: no
finding.
"""

from __future__ import annotations

import polars as pl

from nsysmap.findings.comm_gaps import idle_claims
from nsysmap.findings.finding import MEDIUM, Claim, Finding, Rule
from nsysmap.findings.inputs import STEPS, Inputs, total_ns
from nsysmap.findings.phrases import count, ms, pct, share

DATA = "data"
# The gaps before the data phase's work that are the host getting the batch ready.
DATA_GAPS = ("launch", "long_launch", "sync")


def data_wait(x: Inputs, rule: Rule) -> list[Finding]:
    """One finding per device whose steps start by waiting for their batch."""
    if x.basis != STEPS:
        return []
    out = []
    for device in x.windows["device_id"].unique().sort().to_list():
        finding = _finding(x, rule, device)
        if finding is not None:
            out.append(finding)
    return out


def _finding(x: Inputs, rule: Rule, device: int) -> Finding | None:
    windows = x.windows.filter(
        (pl.col("device_id") == device)
        & (pl.col("next_phase") == DATA)
        & pl.col("gap_ns").is_not_null()
    )
    pools = x.idle_pools.filter((pl.col("device_id") == device) & (pl.col("phase") == DATA))
    between, inside = total_ns(windows, "gap_ns"), _data_idle(pools)
    steps, step_ns = x.step_count(device), x.step_ns(device)
    if rule.below_min_share(x, device, between + inside):
        return None
    claims = tuple(
        Claim(
            ("between_steps", x.rank, device, row["step"], None, None), row["gap_ns"], row["gap_ns"]
        )
        for row in windows.iter_rows(named=True)
        if row["gap_ns"]
    )
    for kind in DATA_GAPS:
        column = f"idle_{kind}_ns"
        claims += idle_claims(x, pools, f"idle_{kind}", column, column)
    evidence = (
        f"before {count(windows.height)} of the {count(steps)} steps the GPU sat idle "
        f"{ms(between / steps)} per step between the last kernel of one step and the data work "
        f"that starts the next; inside the steps the data phase waited {ms(inside / steps)} per "
        f"step for its work to be launched; {pct(share((between + inside) / steps, step_ns))} "
        "of the step in all"
    )
    return Finding(
        rule=rule,
        device_id=device,
        phase=DATA,
        place=f"{x.where(device)}, start of each step",
        evidence=evidence,
        evidence_rows=f"{x.step_rows} of device_id {device}; "
        "idle.parquet: gaps of kind launch and sync before phase data's work",
        basis_ns=between + inside,
        claims=claims,
        estimate="the idle time before each step's data work: batches made ahead by loader "
        "workers are ready when the step asks, so at most this much goes",
        confidence=MEDIUM,
        rank=x.rank,
    )


def _data_idle(pools: pl.DataFrame) -> int:
    return sum(total_ns(pools, f"idle_{kind}_ns") for kind in DATA_GAPS)
