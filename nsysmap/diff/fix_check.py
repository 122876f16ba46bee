"""`nsysmap diff`: which findings of run A are gone in run B, and whether the time saved is
within their estimate (pure).

Findings are matched by `finding_key` (the rule and where: device, phase,
module, ...). The *measured* saving is the drop in step time from A to B on
the devices of the findings gone: a step's time as the findings define it
(nsysmap.findings.inputs: its wall time and the gap before the next step),
the median over the steps, which a step slowed by something outside the run
moves little. Against the *estimated* saving (the gone findings' savings per
step, summed) it is:

* `no saving`: B's steps are not shorter;
* for savings that are upper bounds: `within` when measured ≤ estimated ×
  (1 + TOLERANCE), else `above` (more went than the findings explain:
  something else changed too);
* for estimates: `within` when |measured − estimated| ≤ TOLERANCE ×
  estimated, else `below` or `above`.

TOLERANCE allows for the noise between two runs of the same code.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from nsysmap.findings import Inputs
from nsysmap.report.answers import RunData
from nsysmap.scalars import to_float
from nsysmap.schemas import FINDINGS, IDLE, LAUNCH_COST

TOLERANCE = 0.25


@dataclass(frozen=True)
class FixCheck:
    """A's findings against B's, and the estimated against the measured saving."""

    gone: pl.DataFrame  # A's findings not in B (FINDINGS rows)
    still: pl.DataFrame  # A's findings also in B
    new: pl.DataFrame  # B's findings not in A
    estimated_ns: int | None  # the gone findings' savings per step, summed (None: none known)
    upper_bound: bool  # every one of them an upper bound
    a_step_ns: float | None  # mean step time on the gone findings' devices, A and B
    b_step_ns: float | None
    verdict: str | None  # within, above, below, no saving; None: nothing to compare

    @property
    def measured_ns(self) -> float | None:
        if self.a_step_ns is None or self.b_step_ns is None:
            return None
        return self.a_step_ns - self.b_step_ns


def step_times(run: RunData) -> dict[int, float]:
    """device -> its median step time: a step's wall time and the gap before the next
    (findings' step time, nsysmap.findings.inputs), the median over the steps followed by
    another (all of them when none is), so that a step slowed by something outside the
    run (the machine busy with other work) moves it little."""
    x = Inputs(run.ops.lazy(), pl.DataFrame(schema=LAUNCH_COST), pl.DataFrame(schema=IDLE))
    times = x.windows.with_columns(time_ns=pl.col("wall_ns") + pl.col("gap_ns"))
    out = {}
    for (device,), rows in times.group_by("device_id"):
        followed = rows.filter(pl.col("time_ns").is_not_null())
        column = followed["time_ns"] if followed.height else rows["wall_ns"]
        out[int(str(device))] = to_float(column.median())
    return out


def check(a: RunData, b: RunData) -> FixCheck | None:
    """A's findings against B's (None when A has no findings.parquet)."""
    if a.findings is None:
        return None
    mine = a.findings.sort("priority")
    theirs = b.findings if b.findings is not None else pl.DataFrame(schema=FINDINGS)
    keys = theirs["finding_key"].implode()
    gone = mine.filter(~pl.col("finding_key").is_in(keys))
    still = mine.filter(pl.col("finding_key").is_in(keys))
    new = theirs.filter(~pl.col("finding_key").is_in(mine["finding_key"].implode()))
    known = gone.filter(pl.col("saving_ns_per_step").is_not_null())
    estimated = int(known["saving_ns_per_step"].sum()) if known.height else None
    bound = bool(known["upper_bound"].all()) if known.height else True
    a_time, b_time = _step_time(a, known), _step_time(b, known)
    verdict = None
    if estimated is not None and a_time is not None and b_time is not None:
        verdict = judged(estimated, a_time - b_time, bound)
    return FixCheck(gone, still, new.sort("priority"), estimated, bound, a_time, b_time, verdict)


def _step_time(run: RunData, findings: pl.DataFrame) -> float | None:
    """The step times of the findings' devices, summed (None when a device has none)."""
    devices = findings["device_id"].unique().to_list()
    if not devices:
        return None
    times = step_times(run)
    if any(d not in times for d in devices):
        return None
    return float(sum(times[d] for d in devices))


def judged(estimated: float, measured: float, upper_bound: bool) -> str:
    """`within`, `above`, `below` or `no saving` (see the module's docstring)."""
    if measured <= 0:
        return "no saving"
    if measured > estimated * (1 + TOLERANCE):
        return "above"
    if upper_bound or measured >= estimated * (1 - TOLERANCE):
        return "within"
    return "below"


LISTED = 8  # findings listed per group
_SAID = {
    "within": "within the estimate",
    "above": "more than the estimate: something else changed too",
    "below": "less than the estimate",
    "no saving": "B's steps are not shorter",
}


def check_lines(fixed: FixCheck | None) -> list[str]:
    """The terminal lines: A's findings gone and still in B, B's new ones, and the estimated
    against the measured saving."""
    if fixed is None:
        return ["Findings: A has no findings.parquet (written before output schema 1.9)."]
    counts = (fixed.gone.height, fixed.still.height, fixed.new.height)
    lines = [
        f"Findings of A: {sum(counts[:2])}; gone in B: {counts[0]}, still in B: {counts[1]}; "
        f"new in B: {counts[2]}."
    ]
    for what, rows in (("gone", fixed.gone), ("still", fixed.still), ("new", fixed.new)):
        for row in rows.head(LISTED).iter_rows(named=True):
            lines.append(
                f"  {what}: #{row['priority']} {row['rule']} ({row['place']}): {_saving(row)}"
            )
        if rows.height > LISTED:
            lines.append(f"  {what}: ... {rows.height - LISTED} more")
    if fixed.estimated_ns is None or fixed.measured_ns is None:
        return lines
    bound = "up to " if fixed.upper_bound else "about "
    lines.append(
        f"Saving of the findings gone: estimated {bound}{_ms(fixed.estimated_ns)} per step; "
        f"measured {_ms(fixed.measured_ns)} (step time {_ms(fixed.a_step_ns)} in A, "
        f"{_ms(fixed.b_step_ns)} in B): {_SAID[fixed.verdict or 'no saving']} "
        f"(±{100 * TOLERANCE:.0f} %)."
    )
    return lines


def _saving(row: dict) -> str:
    if row["saving_ns_per_step"] is None:
        return "saving unknown"
    bound = "up to " if row["upper_bound"] else "about "
    return f"{bound}{_ms(row['saving_ns_per_step'])} per step"


def _ms(ns: float | None) -> str:
    return "–" if ns is None else f"{ns / 1e6:,.3f} ms"
