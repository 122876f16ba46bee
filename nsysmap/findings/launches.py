"""Rule launch_bound: the GPU waiting for the host to launch each kernel.

It reads the idle gaps of each device's busiest stream (idle.parquet, per
phase and module of the work that ended them: nsysmap.findings.inputs) and
launch_cost.parquet (launch calls). A phase is *launch-bound* when the GPU
spent a large share of its wall time there (its work plus the gaps before
it) waiting for the host to launch the next kernel: `launch` gaps up to
`max_launch_gap_ns`, launch overhead; longer ones are other host work, which
no CUDA graph removes by itself, and are only told. A phase that already
runs CUDA graphs makes no finding.
"""

from __future__ import annotations

import polars as pl

from nsysmap.attribution.module_names import layer_path
from nsysmap.findings.comm_gaps import idle_claims
from nsysmap.findings.finding import MEDIUM, Finding, Rule
from nsysmap.findings.inputs import Inputs, total_ns
from nsysmap.findings.phrases import count, ms, pct, phase_text, share, top_names
from nsysmap.findings.threshold import LAUNCH_GAP


def graph_phases(x: Inputs) -> set[tuple[int, str | None]]:
    """(device, phase) pairs holding CUDA graph work: launches there are already few."""
    graphs = x.measured().filter((pl.col("kind") == "graph") | pl.col("graph_id").is_not_null())
    rows = graphs.select("device_id", "phase").unique().collect()
    return {(r["device_id"], r["phase"]) for r in rows.iter_rows(named=True)}


def launch_bound(x: Inputs, rule: Rule) -> list[Finding]:
    """One finding per device and phase whose GPU mostly waited for launches."""
    pools = x.idle_pools
    if pools.is_empty():
        return []
    graphed = graph_phases(x)
    out = []
    for (device, phase), rows in pools.group_by("device_id", "phase", maintain_order=True):
        if (device, phase) in graphed:
            continue
        finding = _launch_finding(x, rule, device, phase, rows)
        if finding is not None:
            out.append(finding)
    return out


def _launch_finding(
    x: Inputs, rule: Rule, device: int, phase: str | None, rows: pl.DataFrame
) -> Finding | None:
    steps = x.step_count(device)
    within = phase_text(phase, x.per_step)  # "phase forward", "the whole step", ...
    idle = total_ns(rows, "idle_launch_ns")
    bound = share(idle, total_ns(rows, "busy_ns") + total_ns(rows, "idle_ns")) or 0.0
    if bound < rule.value("min_launch_bound_share") or rule.below_min_share(x, device, idle):
        return None
    calls = x.launch_costs.filter(
        (pl.col("device_id") == device) & pl.col("phase").eq_missing(phase)
    )
    launches = total_ns(calls, "launches")
    short = (
        None
        if calls["shorter_than_launch"].is_null().all()
        else total_ns(calls, "shorter_than_launch")
    )
    longer = total_ns(rows, "idle_long_launch_ns")
    layers = rows.with_columns(layer=layer_path("module"))
    evidence = (
        f"in {within} the GPU waited {ms(idle / steps)}{x.per} for the host to "
        f"launch the next kernel, in gaps of up to {ms(LAUNCH_GAP.value)}: {pct(bound)} of that "
        f"work's wall time on its busiest stream; {count(launches / steps)} launches{x.per}"
    )
    if short is not None:
        shorter = "of kernels that ran for less time than their launch call took"
        evidence += f", {count(short / steps)} {shorter}"
    named = top_names(layers, "layer", "idle_launch_ns")
    evidence += f"; most of the wait before the work of {named}" if named else ""
    if longer:
        evidence += f"; longer gaps, other host work, {ms(longer / steps)}{x.per} more"
    return Finding(
        rule=rule,
        device_id=device,
        phase=phase,
        place=f"{x.where(device)}, {within}",
        evidence=evidence,
        evidence_rows=f"idle.parquet: kind launch, device_id {device}, phase {phase or 'null'}, "
        "busiest stream; launch_cost.parquet (launches, shorter_than_launch)",
        basis_ns=idle,
        claims=idle_claims(x, rows, "idle_launch", "idle_launch_ns", "idle_launch_ns"),
        estimate="the launch gaps: a CUDA graph replays the phase's kernels without host "
        "launches, removing those gaps at most",
        confidence=MEDIUM,
        rank=x.rank,
    )
