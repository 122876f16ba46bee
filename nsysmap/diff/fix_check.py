"""`nsysmap diff`: which findings of run A are gone in run B, and whether the time saved is
within their estimate (pure).

Findings are matched by `finding_key` (the rule and where: device, phase,
module, ...). The *measured* saving is the drop from A to B, on the devices
of the findings gone, in the time of the one phase they are all about (its
wall time in each step: what their savings are taken from), else in the step
time (a step's wall time and the gap before the next, as findings count it:
nsysmap.findings.inputs); both the median over the steps, which a step
slowed by something outside the run moves little. Against the *estimated*
saving (the gone findings' savings per step, summed) it is:

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

from nsysmap.core.findings_schema import FINDINGS, per_words
from nsysmap.core.inert import terminal_text
from nsysmap.core.scalars import to_float
from nsysmap.core.wait_schemas import IDLE, LAUNCH_COST
from nsysmap.findings import Inputs
from nsysmap.findings.inputs import STEPS
from nsysmap.report.answers import RunData

TOLERANCE = 0.25


@dataclass(frozen=True)
class FixCheck:
    """A's findings against B's, and the estimated against the measured saving."""

    gone: pl.DataFrame  # A's findings not in B (FINDINGS rows)
    still: pl.DataFrame  # A's findings also in B
    new: pl.DataFrame  # B's findings not in A
    estimated_ns: int | None  # the gone findings' savings per step, summed (None: none known)
    upper_bound: bool  # every one of them an upper bound
    step: tuple[float | None, float | None]  # A's and B's median step time (those devices)
    phase: str | None = None  # the one phase every gone finding is about, else None
    in_phase: tuple[float | None, float | None] = (None, None)  # its time per step, A and B
    # The gone findings' figures are per step (False: A measured no step, and its
    # measured work counts as one: totals over it).
    per_step: bool = True

    @property
    def measured_ns(self) -> float | None:
        """The drop in the phase's time where the findings gone are about one phase, else in
        the step's."""
        a, b = self.in_phase if self.phase is not None else self.step
        return None if a is None or b is None else a - b

    @property
    def verdict(self) -> str | None:
        """within, above, below, no saving; None: nothing to compare."""
        measured = self.measured_ns
        if self.estimated_ns is None or measured is None:
            return None
        return judged(self.estimated_ns, measured, self.upper_bound)


def median_times(run: RunData, phase: str | None = None) -> dict[int, float]:
    """device -> the median over the steps of its step time (a step's wall time and the gap
    before the next, as findings count it: nsysmap.findings.inputs; of the steps followed by
    another, where any is), or with `phase`, of that phase's wall time in each step. A
    median: a step slowed by something outside the run (a busy machine) moves it little.
    Without steps or phases the one step is the run's measured region (its structure), as
    the findings counted it."""
    x = Inputs(
        run.ops.lazy(),
        pl.DataFrame(schema=LAUNCH_COST),
        pl.DataFrame(schema=IDLE),
        structure=run.structure,
    )
    if phase is None:
        times = x.windows.with_columns(time_ns=pl.col("wall_ns") + pl.col("gap_ns"))
        times = times.with_columns(
            time_ns=pl.when(pl.col("time_ns").is_not_null().any().over("device_id"))
            .then("time_ns")
            .otherwise("wall_ns")
        )
    else:
        key = ["device_id", "step"] if x.basis == STEPS else ["device_id"]
        ops = x.measured().filter(pl.col("phase") == phase).group_by(key)
        times = ops.agg(time_ns=pl.col("end_ns").max() - pl.col("start_ns").min()).collect()
    medians = times.group_by("device_id").agg(pl.col("time_ns").median())
    return {int(r["device_id"]): to_float(r["time_ns"]) for r in medians.iter_rows(named=True)}


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
    step = (_summed(a, known, None), _summed(b, known, None))
    phases = known["phase"].unique().to_list()
    phase = phases[0] if len(phases) == 1 else None
    in_phase = (_summed(a, known, phase), _summed(b, known, phase)) if phase else (None, None)
    per_step = any(p is not False for p in known["per_step"])
    new = new.sort("priority")
    return FixCheck(gone, still, new, estimated, bound, step, phase, in_phase, per_step)


def _summed(run: RunData, findings: pl.DataFrame, phase: str | None) -> float | None:
    """`median_times` of the findings' devices, summed (None when a device has none)."""
    devices = findings["device_id"].unique().to_list()
    times = median_times(run, phase)
    if not devices or any(d not in times for d in devices):
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
            where = terminal_text(row["place"])
            lines.append(f"  {what}: #{row['priority']} {row['rule']} ({where}): {_saving(row)}")
        if rows.height > LISTED:
            lines.append(f"  {what}: ... {rows.height - LISTED} more")
    if fixed.estimated_ns is None or fixed.measured_ns is None:
        return lines
    bound = "up to " if fixed.upper_bound else "about "
    per = per_words(fixed.per_step)
    a, b = _ms(fixed.step[0]), _ms(fixed.step[1])
    where = (
        f"in phase {fixed.phase} ({_ms(fixed.in_phase[0])}{per} in A, "
        f"{_ms(fixed.in_phase[1])} in B; the {'step' if fixed.per_step else 'measured wall time'} "
        f"{a} and {b})"
        if fixed.phase is not None
        else f"({'step' if fixed.per_step else 'measured'} time {a} in A, {b} in B)"
    )
    lines.append(
        f"Saving of the findings gone: estimated {bound}{_ms(fixed.estimated_ns)}{per}; "
        f"measured {_ms(fixed.measured_ns)} {where}: {_SAID[fixed.verdict or 'no saving']} "
        f"(±{100 * TOLERANCE:.0f} %)."
    )
    return lines


def _saving(row: dict) -> str:
    if row["saving_ns_per_step"] is None:
        return "saving unknown"
    bound = "up to " if row["upper_bound"] else "about "
    return f"{bound}{_ms(row['saving_ns_per_step'])}{per_words(row.get('per_step'))}"


def _ms(ns: float | None) -> str:
    return "–" if ns is None else f"{ns / 1e6:,.3f} ms"
