"""Rule exposed_communication: communication kernels nothing hides, per collective and phase.

Hidden and exposed time are nsysmap's one definition
(nsysmap.summaries.comm_overlap: compute of the same process on another stream
of the device hides a communication kernel); the collective is read from the
kernel's name or its annotation (nsysmap.report.collectives). Only the
measured steps count, so a one-off broadcast at initialisation, outside every
step, is no per-step cost; without steps (neither step ranges nor steps of the
structure) broadcasts are taken as that and left out. The saving is at most
the exposed time: overlap hides communication behind compute, it cannot hide
the time a rank waits for a slower one (rule straggler).
"""

from __future__ import annotations

import polars as pl

from nsysmap.findings.comm_gaps import exposed_kernels
from nsysmap.findings.finding import MEDIUM, Finding, Rule, claims_of
from nsysmap.findings.inputs import Inputs
from nsysmap.findings.phrases import ms, pct, phase_text, plural, share

# What overlaps each collective with compute, by collective.
FIXES = {
    "all_reduce": "DDP: DistributedDataParallel(model, bucket_cap_mb=..., "
    "gradient_as_bucket_view=True) so that gradient buckets all-reduce while backward runs; "
    "no work between loss.backward() and the optimizer that waits on them",
    "all_gather": "FSDP: FullyShardedDataParallel(..., forward_prefetch=True, "
    "backward_prefetch=BackwardPrefetch.BACKWARD_PRE) (FSDP2: fully_shard(..., "
    "reshard_after_forward=...)), so that each layer's all-gather runs under the layer before",
    "reduce_scatter": "FSDP: backward_prefetch=BackwardPrefetch.BACKWARD_PRE and a larger "
    "bucket so that gradient reduce-scatters run under the backward of the next layers",
    "all_to_all": "split the batch (or the sequence) so that one part's all-to-all runs under "
    "the other part's compute; recommendation models: TorchRec's TrainPipelineSparseDist "
    "pipelines the sparse all-to-all with the dense compute",
}
OTHER_FIX = (
    "launch the collective asynchronously (async_op=True, or on a side stream) and wait for it "
    "only where its result is used, so that compute runs meanwhile"
)


def exposed(x: Inputs) -> pl.DataFrame:
    """Per device, phase and collective: kernels, their time and the exposed part."""
    named = exposed_kernels(x)
    if named.is_empty():
        return named
    return named.group_by("device_id", "phase", "collective").agg(
        kernels=pl.len(),
        comm_ns=pl.col("dur_ns").sum(),
        exposed_ns=pl.col("exposed_ns").sum(),
    )


def exposed_communication(x: Inputs, rule: Rule) -> list[Finding]:
    """One finding per device, phase and collective with much exposed communication."""
    found = exposed(x)
    if found.is_empty():
        return []
    rows = found.sort("device_id", "phase", "collective", nulls_last=True)
    made = (_finding(x, rule, row) for row in rows.iter_rows(named=True))
    return [f for f in made if f is not None]


COMM_KEYS = ["device_id", "phase", "module", "collective"]  # comm_exposed's keys


def _finding(x: Inputs, rule: Rule, row: dict) -> Finding | None:
    device, phase, what = row["device_id"], row["phase"], row["collective"]
    steps, step_ns = x.step_count(device), x.step_ns(device)
    within = phase_text(phase, x.per_step)  # "phase forward", "the whole step", ...
    time, hidden_share = row["exposed_ns"], 1 - (share(row["exposed_ns"], row["comm_ns"]) or 0)
    if rule.below_min_share(x, device, time):
        return None
    evidence = (
        f"{plural(row['kernels'] / steps, f'{what} kernel')}{x.per} in {within} "
        f"take {ms(row['comm_ns'] / steps)}{x.per}, of which {pct(hidden_share)} hidden "
        f"behind compute and {ms(time / steps)} exposed "
        f"({pct(share(time / steps, step_ns))} of {x.the_step})"
    )
    claim = pl.DataFrame([row]).with_columns(module=pl.col("collective"))
    return Finding(
        rule=rule,
        device_id=device,
        phase=phase,
        place=f"{x.where(device)}, {within}, {what}",
        evidence=evidence,
        evidence_rows=f"ops.parquet: category communication, device_id {device}, "
        f"{within}; overlap.parquet (exposed_ns)",
        basis_ns=time,
        claims=claims_of(claim, "comm_exposed", COMM_KEYS, "exposed_ns", "exposed_ns", x.rank),
        estimate="the exposed communication time: overlapped perfectly it would be hidden; "
        "time spent waiting for slower ranks stays",
        confidence=MEDIUM,
        fix=FIXES.get(what, OTHER_FIX),
        rank=x.rank,
        extra_key=what,
    )
