"""Rule per_parameter_optimizer: an optimizer that runs several small kernels per parameter.

In the optimizer phase, a per-parameter optimizer (`foreach=False`, PyTorch's
default on the CPU, or a hand-written loop over the parameters) launches one
small elementwise kernel per operation and parameter, and no multi-tensor
(`multi_tensor_apply`, `_foreach_*`) or fused optimizer kernel (category
`optimizer`). What a foreach or fused optimizer saves:

* on a GPU, the launch gaps (up to `max_launch_gap_ns`) and latency gaps
  before those kernels on the busiest stream: a few kernels for all the
  parameters launch no faster, but there are few of them. An upper bound of
  the launches' cost; what `fused=True` saves of memory traffic is not counted;
* on the CPU backend, where operators nest and the host runs them itself:
  each outermost call's fixed cost (the cheapest call of its kind, that of
  the smallest parameter) beyond one call per kind and step, and the host
  time between the calls, out of the phase's wall time. An estimate, not a
  bound.

A profile without an optimizer phase cannot tell: no finding.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from nsysmap.core.scalars import to_int
from nsysmap.findings.comm_gaps import idle_claims
from nsysmap.findings.finding import LOW, MEDIUM, Claim, Finding, Rule, claims_of
from nsysmap.findings.inputs import OWNER, Inputs, total_ns
from nsysmap.findings.phrases import count, ms

OPTIMIZER = "optimizer"
# Categories of what a per-parameter optimizer launches (CPU operators aten::lerp_ and
# aten::to are `other`).
PER_PARAMETER = ("elementwise", "reduction", "other")
# On the CPU, foreach=True runs the same per-parameter operators underneath.
CPU_FIX = (
    "torch.optim.AdamW(params, fused=True) (the same for Adam, SGD, Adagrad, ...); on the CPU "
    "foreach=True calls the per-parameter operators underneath and saves little"
)


@dataclass(frozen=True)
class Cost:
    """What the per-parameter calls cost, and how much of it a fused optimizer saves."""

    claims: tuple[Claim, ...]
    basis_ns: int  # the time the saving comes from
    calls: int  # kernels (GPU) or outermost operator calls (CPU), all steps
    kinds: int  # kinds of operation among them
    estimate: str


def per_parameter_optimizer(x: Inputs, rule: Rule) -> list[Finding]:
    """One finding per device whose optimizer runs one kernel per operation and parameter."""
    counts = (
        x.measured()
        .filter(pl.col("phase") == OPTIMIZER)
        .group_by("device_id")
        .agg(
            fused=(pl.col("category") == OPTIMIZER).sum(),
            small=pl.col("category").is_in(PER_PARAMETER).sum(),
        )
        .collect()
    )
    out = []
    for row in counts.iter_rows(named=True):
        device = row["device_id"]
        if row["fused"] or row["small"] / x.step_count(device) < rule.value("min_kernels_per_step"):
            continue
        finding = _finding(x, rule, device)
        if finding is not None:
            out.append(finding)
    return out


def _finding(x: Inputs, rule: Rule, device: int) -> Finding | None:
    steps = x.step_count(device)
    cost = cpu_cost(x, device) if x.cpu else gpu_cost(x, device)
    if rule.below_min_share(x, device, sum(c.ns for c in cost.claims)):
        return None
    unit = "operator calls" if x.cpu else "kernels"
    where = "the phase takes" if x.cpu else "the GPU waits"
    evidence = (
        f"the optimizer phase runs {count(cost.calls / steps)} small {unit}{x.per}, of only "
        f"{count(cost.kinds)} distinct {'operators' if x.cpu else 'kernels'}, and no "
        f"multi-tensor or fused optimizer kernel; {where} {ms(cost.basis_ns / steps)}{x.per}"
        + ("" if x.cpu else " in launch and latency gaps before them")
    )
    return Finding(
        rule=rule,
        device_id=device,
        phase=OPTIMIZER,
        place=f"{x.where(device)}, phase optimizer",
        evidence=evidence,
        evidence_rows=f"ops.parquet: phase optimizer, device_id {device}"
        + ("" if x.cpu else "; idle.parquet: kinds launch and latency before phase optimizer"),
        basis_ns=cost.basis_ns,
        claims=cost.claims,
        estimate=cost.estimate,
        confidence=LOW if x.cpu else MEDIUM,
        upper_bound=not x.cpu,
        rank=x.rank,
        fix=CPU_FIX if x.cpu else None,
    )


def gpu_cost(x: Inputs, device: int) -> Cost:
    """GPU: the launch and latency gaps before the optimizer phase's kernels."""
    rows = x.idle_pools.filter((pl.col("device_id") == device) & (pl.col("phase") == OPTIMIZER))
    claims = idle_claims(x, rows, "idle_launch", "idle_launch_ns", "idle_launch_ns")
    claims += idle_claims(x, rows, "idle_latency", "idle_latency_ns", "idle_latency_ns")
    kernels = (
        x.measured()
        .filter((pl.col("device_id") == device) & (pl.col("phase") == OPTIMIZER))
        .select(calls=pl.len(), kinds=pl.col("name").n_unique())
        .collect()
    )
    return Cost(
        claims,
        total_ns(rows, "idle_launch_ns") + total_ns(rows, "idle_latency_ns"),
        to_int(kernels["calls"][0]),
        to_int(kernels["kinds"][0]),
        "the launch and latency gaps before the optimizer's kernels: a foreach or fused "
        "optimizer launches a few kernels for all parameters, so those gaps go (the memory "
        "traffic fused=True saves too is not counted)",
    )


def cpu_cost(x: Inputs, device: int) -> Cost:
    """CPU backend: each call's fixed cost beyond one call per kind, and the host time
    between the calls (see the module's docstring)."""
    calls = _outer_calls(x, device)
    kinds = calls.group_by("name").agg(n=pl.len(), least=pl.col("wall_ns").min())
    steps = x.step_count(device)
    fixed = to_int(((kinds["n"] - steps).clip(0) * kinds["least"]).sum()) if kinds.height else 0
    per_step = calls.group_by("step").agg(
        wall=pl.col("end_ns").max() - pl.col("start_ns").min(), inside=pl.col("wall_ns").sum()
    )
    wall = total_ns(per_step, "wall")
    between = (
        to_int((per_step["wall"] - per_step["inside"]).clip(0).sum()) if per_step.height else 0
    )
    pool = pl.DataFrame(
        {"device_id": [device], "phase": [OPTIMIZER], "module": [None], "want": [fixed + between]},
        schema_overrides={"module": pl.String},
    ).with_columns(wall=pl.lit(wall, pl.Int64))
    return Cost(
        claims_of(pool, "phase_wall", OWNER, "want", "wall", x.rank),
        wall,
        calls.height,
        kinds.height,
        "each call's fixed cost (the cheapest call of its kind) beyond one call per kind, and "
        "the host time between the calls: what a fused optimizer, one call for all parameters, "
        "no longer spends; at most the phase's wall time",
    )


def _outer_calls(x: Inputs, device: int) -> pl.DataFrame:
    """The optimizer phase's outermost operator calls (none inside another), per step."""
    lane = ["step", "stream_id"]
    inner = pl.col("end_ns").cum_max().shift(1).over(lane) > pl.col("start_ns")
    ops = (
        x.measured()
        .filter((pl.col("device_id") == device) & (pl.col("phase") == OPTIMIZER))
        .select(*lane, "name", "start_ns", "end_ns")
        .sort([*lane, "start_ns"])
        .with_columns(inner=inner.fill_null(False), wall_ns=pl.col("end_ns") - pl.col("start_ns"))
    )
    return ops.filter(~pl.col("inner")).collect()
