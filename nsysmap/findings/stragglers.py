"""Rule straggler: across ranks, the rank that makes the others wait, and its slow layer.

Read from the tables of several reports (nsysmap.many.cross_rank): per step,
`stragglers.parquet` names the rank with the most compute and the time the
fastest rank waits for it inside the collectives (`straggler_cost_ns`);
`rank_module_phase.parquet` says in which module and phase the slow rank
spends most more than the median rank. The fastest rank's wait is part of
its exposed communication, so the finding claims it there (the same time
exposed_communication claims on that rank) and the two are counted once.
One report alone makes no finding.
"""

from __future__ import annotations

import polars as pl

from nsysmap.core.inert import markdown_code
from nsysmap.core.scalars import to_float
from nsysmap.findings.comm import COMM_KEYS, exposed
from nsysmap.findings.finding import MEDIUM, Claim, Finding, Rule, claims_of, spread
from nsysmap.findings.inputs import Inputs, total_ns
from nsysmap.findings.phrases import count, ms, pct, share


def straggler(x: Inputs, rule: Rule) -> list[Finding]:
    """One finding for the job whose fastest rank waits for a slower one."""
    across = x.across or {}
    if "stragglers" not in across or "rank_steps" not in across:
        return []
    steps = across["stragglers"].filter(pl.col("step").is_not_null())
    spans = across["rank_steps"].filter(pl.col("step").is_not_null())
    n, cost = steps.height, total_ns(steps, "straggler_cost_ns")
    step_ns = round(to_float(spans["span_ns"].mean())) if spans.height else 0
    if not cost or cost / n < rule.value("min_share") * step_ns:
        return []
    slow, fast = _most(steps, "slowest_rank"), _most(steps, "fastest_rank")
    layer = _slow_layer(across.get("rank_module_phase"), slow)
    return [
        Finding(
            rule=rule,
            device_id=None,
            module=layer["module"] if layer else None,
            phase=layer["phase"] if layer else None,
            place=f"rank {slow}"
            + (
                f", module {markdown_code(layer['module'])} ({layer['phase'] or 'no phase'})"
                if layer
                else ""
            ),
            evidence=_evidence(steps, slow, fast, layer, step_ns),
            evidence_rows="stragglers.parquet (slowest_rank, straggler_cost_ns); "
            "rank_module_phase.parquet (excess_ns); rank_steps.parquet (collective_wait_ns)",
            basis_ns=cost,
            claims=_claims(x, fast, cost),
            estimate="the fastest rank's wait for the slowest inside the collectives: balanced, "
            "no rank waits; at most this much goes",
            confidence=MEDIUM,
            rank=slow,
            steps=n,
            step_ns=step_ns,
        )
    ]


def _evidence(steps: pl.DataFrame, slow: int, fast: int, layer: dict | None, step_ns: int) -> str:
    n, cost = steps.height, total_ns(steps, "straggler_cost_ns")
    slowest = steps.filter(pl.col("slowest_rank") == slow).height
    text = (
        f"rank {slow} computes the longest in {count(slowest)} of {count(n)} steps; the "
        f"fastest rank (most often rank {fast}) waits {ms(cost / n)} per step for it inside "
        f"the collectives ({pct(share(cost / n, step_ns))} of the step)"
    )
    if layer:
        text += (
            f"; rank {slow} spends {ms(layer['excess_ns'] / n)} per step more than the median "
            f"rank in {markdown_code(layer['module'])}"
        )
    return text


def _most(steps: pl.DataFrame, column: str) -> int:
    """The rank named most often in `column` (ties: the lowest)."""
    counted = steps.group_by(column).agg(n=pl.len()).sort(["n", column], descending=[True, False])
    return int(counted[column][0])


def _slow_layer(table: pl.DataFrame | None, slow: int) -> dict | None:
    """The module and phase where `slow` exceeds the median rank most."""
    if table is None or table.is_empty():
        return None
    rows = table.filter((pl.col("slowest_rank") == slow) & pl.col("module").is_not_null())
    rows = rows.sort(["excess_ns", "module"], descending=[True, False])
    return rows.row(0, named=True) if rows.height and rows["excess_ns"][0] > 0 else None


def _claims(x: Inputs, fast: int, cost: int) -> tuple[Claim, ...]:
    """The wait, from the fastest rank's exposed communication (as exposed_communication
    keys it), in proportion; a pool of its own when that rank's operations are not here."""
    mine = next((r for r in x.ranks if r.rank == fast), None)
    rows = exposed(mine) if mine is not None else pl.DataFrame()
    if rows.is_empty():
        return (Claim(("straggler", fast, None, None, None, None), cost, cost),)
    rows = spread(rows.with_columns(module=pl.col("collective")), cost, "exposed_ns")
    return claims_of(rows, "comm_exposed", COMM_KEYS, "_want", "exposed_ns", fast)
