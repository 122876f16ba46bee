"""Rule elementwise_chain: long runs of short elementwise kernels in one module.

On each stream, in the order they ran, a *chain* is a run of consecutive
elementwise kernels of one module and phase, each shorter than
`short_kernel_ns` (CPU operators: of any length), not made by torch.compile
(no compiled graph, no `triton_` name). A chain of N such kernels reads and
writes its tensors N times where one fused kernel would do it once, and
waits for N launches: fusing it saves at most the gaps between its kernels
and (N − 1)/N of their time (the memory traffic estimate). Only gaps of up
to LAUNCH_GAP count: a longer one is host work between the kernels (a first
call's set-up), which fusing them does not shorten (the launch_bound rule
leaves such gaps out alike). Chains are summed per layer (the module path
with its numbers as `*`) and phase.
"""

from __future__ import annotations

import polars as pl

from nsysmap.attribution.module_names import layer_path
from nsysmap.core.inert import markdown_code
from nsysmap.findings.comm_gaps import idle_claims
from nsysmap.findings.finding import LOW, Claim, Finding, Rule, claims_of
from nsysmap.findings.inputs import BUSY_KEYS, OWNER, Inputs, total_ns
from nsysmap.findings.phrases import count, ms, pct, phase_text, plural, share
from nsysmap.findings.threshold import LAUNCH_GAP

ELEMENTWISE = "elementwise"
COMPILED = r"^triton_"


def chains(x: Inputs, short_ns: float, min_chain: int) -> pl.DataFrame:
    """One row per chain: device, stream, phase, module, kernels, busy_ns, gaps_ns."""
    short = pl.lit(True) if x.cpu else pl.col("dur_ns") < short_ns
    member = (
        (pl.col("category") == ELEMENTWISE)
        & short
        & pl.col("module").is_not_null()
        & pl.col("compiled_graph").is_null()
        & ~pl.col("name").fill_null("").str.contains(COMPILED)
    )
    lane = ["device_id", "stream_id"]
    prev = [pl.col(c).shift(1).over(lane) for c in ("module", "phase", "_member", "end_ns")]
    ordered = (
        x.measured()
        .filter(pl.col("kind").is_in(["kernel", "cpu_op"]))
        .select(
            *lane,
            "start_ns",
            "end_ns",
            "dur_ns",
            pl.col("phase", "module").cast(pl.Categorical),  # codes, not texts, through the sort
            _member=member,
        )
        .sort([*lane, "start_ns"])
        .with_columns(
            _new=~pl.col("_member")
            | ~prev[2].fill_null(False)
            | (pl.col("module") != prev[0]).fill_null(True)
            | pl.col("phase").ne_missing(prev[1]),
            _gap=_launch_gap(pl.col("start_ns") - prev[3]),
        )
        .with_columns(_chain=pl.col("_new").cum_sum().over(lane))
        .filter("_member")
        .with_columns(_gap=pl.when(pl.col("_new")).then(0).otherwise("_gap"))
    )
    found = ordered.group_by([*lane, "_chain"]).agg(
        pl.col("phase").first(),
        pl.col("module").first(),
        kernels=pl.len(),
        busy_ns=pl.col("dur_ns").sum(),
        gaps_ns=pl.col("_gap").sum(),
    )
    kept = found.filter(pl.col("kernels") >= min_chain).drop("_chain").collect()
    kept = kept.with_columns(pl.col("phase", "module").cast(pl.String))
    return kept.with_columns(gaps_ns=pl.lit(0, pl.Int64)) if x.cpu else kept


def _launch_gap(gap: pl.Expr) -> pl.Expr:
    """The idle time between two chained kernels that fusing them saves: the gap, up to
    LAUNCH_GAP; a longer one is host work between them (a first call's set-up, say),
    which one fused kernel does not shorten, and counts 0."""
    gap = gap.clip(0)
    return pl.when(gap <= LAUNCH_GAP.value).then(gap).otherwise(0)


def elementwise_chain(x: Inputs, rule: Rule) -> list[Finding]:
    """One finding per device, phase and layer whose elementwise chains fusion would shorten."""
    if not x.has(ELEMENTWISE, in_module=True):
        return []
    found = chains(x, rule.value("short_kernel_ns"), int(rule.value("min_chain")))
    if found.is_empty():
        return []
    found = found.with_columns(
        layer=layer_path("module"),
        traffic_ns=(pl.col("busy_ns") * (1 - 1 / pl.col("kernels"))).floor().cast(pl.Int64),
    )
    out = []
    for (device, phase, layer), rows in found.group_by(
        "device_id", "phase", "layer", maintain_order=True
    ):
        finding = _finding(x, rule, device, phase, layer, rows)
        if finding is not None:
            out.append(finding)
    return out


def _finding(
    x: Inputs, rule: Rule, device: int, phase: str | None, layer: str, rows: pl.DataFrame
) -> Finding | None:
    steps, step_ns = x.step_count(device), x.step_ns(device)
    within = phase_text(phase, x.per_step)  # "phase forward", "the whole step", ...
    claims = _claims(x, rows)
    saving = sum(c.ns for c in claims)
    if rule.below_min_share(x, device, saving):
        return None
    kernels, busy = total_ns(rows, "kernels"), total_ns(rows, "busy_ns")
    unit = "CPU operators" if x.cpu else "kernels"
    name = markdown_code(layer)
    evidence = (
        f"in {within}, {name} runs {plural(rows.height / steps, 'chain')} of "
        f"elementwise {unit}{x.per} ({count(kernels / rows.height)} {unit} each on average, "
        f"{ms(busy / steps)}{x.per}"
        + (
            ""
            if x.cpu
            else f", with {ms(total_ns(rows, 'gaps_ns') / steps)} of launch gaps between them"
        )
        + f"); fusing each into one would save {pct(share(saving / steps, step_ns))} of "
        + x.the_step
    )
    return Finding(
        rule=rule,
        device_id=device,
        phase=phase,
        module=layer,
        place=f"{x.where(device)}, {within}, module {name}",
        evidence=evidence,
        evidence_rows=f"ops.parquet: device_id {device}, {within}, layer {name}, "
        "category elementwise, in stream order",
        basis_ns=busy + total_ns(rows, "gaps_ns"),
        claims=claims,
        estimate="the gaps between the chained kernels and (N − 1)/N of their time, N kernels "
        "to a chain: one fused kernel moves the data once and is launched once",
        confidence=LOW,
        rank=x.rank,
    )


def _claims(x: Inputs, rows: pl.DataFrame) -> tuple[Claim, ...]:
    """The chains' memory traffic from the busy pool, their gaps from the launch-gap and
    then the latency-gap pools of the same device, phase and module."""
    per = rows.group_by(OWNER).agg(pl.col("traffic_ns", "gaps_ns").sum())
    busy = x.with_busy(per.with_columns(category=pl.lit(ELEMENTWISE)))
    claims = claims_of(busy, "busy", BUSY_KEYS, "traffic_ns", "busy_ns", x.rank)
    if x.idle_pools.is_empty():
        return claims
    idle = per.join(x.idle_pools, on=OWNER, how="inner", nulls_equal=True).with_columns(
        _launch=pl.min_horizontal("gaps_ns", "idle_launch_ns"),
    )
    idle = idle.with_columns(
        _latency=pl.min_horizontal(pl.col("gaps_ns") - pl.col("_launch"), "idle_latency_ns")
    )
    claims += idle_claims(x, idle, "idle_launch", "_launch", "idle_launch_ns")
    return claims + idle_claims(x, idle, "idle_latency", "_latency", "idle_latency_ns")
