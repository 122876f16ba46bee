"""What a rule is and what it finds: rules with named thresholds, findings with their claims.

A finding's estimated saving is made of *claims*: parts of a pool of time
(GPU busy time of one category in one phase and module, idle time of one
kind before one phase and module's work, exposed communication, ...), each
with the time it wants from there and the time there is. Two findings over
the same time claim the same key; the ranking (nsysmap.findings.rank) gives
each key's time once, so savings never add up to more than the profile has.
Everything is a total over the measured steps; the table divides by them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from nsysmap.findings.threshold import Threshold

if TYPE_CHECKING:
    from nsysmap.findings.inputs import Inputs

# A claim's key: (pool, rank, device_id, phase, module, what) with None for "none".
CAUSE, SPECIFIC, GENERAL = 0, 1, 2  # a rule's tier
Key = tuple[str | int | None, ...]
HIGH, MEDIUM, LOW = "high", "medium", "low"
DOCS = "docs/findings.md"


@dataclass(frozen=True)
class Rule:
    """One rule: what it finds, the fix it proposes, its thresholds and its detector."""

    id: str
    title: str
    fix: str
    anchor: str  # the section of docs/findings.md
    thresholds: tuple[Threshold, ...]
    detect: Callable[[Inputs, Rule], list[Finding]]
    # When its findings are served (nsysmap.findings.rank): a lower tier first, so a rule that
    # names the cause (a straggler) gets the time before one that names the symptom.
    tier: int = 1
    # The title and the fix where no step is measured and the work counts as one ("": the
    # same as with steps).
    unstepped_title: str = ""
    unstepped_fix: str = ""

    def title_for(self, stepped: bool) -> str:
        """The title of a finding per measured step (`stepped`), or over the measured work."""
        return self.title if stepped or not self.unstepped_title else self.unstepped_title

    def fix_for(self, stepped: bool) -> str:
        """The fix of a finding per measured step (`stepped`), or over the measured work."""
        return self.fix if stepped or not self.unstepped_fix else self.unstepped_fix

    def value(self, name: str) -> float:
        """The threshold called `name`."""
        return next(t.value for t in self.thresholds if t.name == name)

    def below_min_share(self, x: Inputs, device: int | None, ns: float) -> bool:
        """Whether `ns`, summed over the steps, is per step less than `min_share` of the
        device's step: too little for a finding."""
        return ns / x.step_count(device) < self.value("min_share") * x.step_ns(device)

    @property
    def doc(self) -> str:
        return f"{DOCS}#{self.anchor}"


@dataclass(frozen=True)
class Claim:
    """`ns` of the time at `key`, of which there is `capacity` (totals over the steps)."""

    key: Key
    ns: int
    capacity: int


@dataclass(frozen=True)
class Finding:
    """One finding before ranking; every time a total over the measured steps."""

    rule: Rule
    device_id: int | None
    place: str
    evidence: str
    evidence_rows: str
    basis_ns: int  # the time the saving is taken from
    claims: tuple[Claim, ...]  # empty: the saving cannot be told (`needs` says why)
    estimate: str
    confidence: str
    upper_bound: bool = True
    phase: str | None = None
    module: str | None = None
    range_path: str | None = None
    fix: str | None = None  # the rule's fix unless said more precisely here
    needs: str | None = None
    rank: int | None = None
    extra_key: str | None = None  # tells two findings of one rule and place apart
    known: bool = field(default=True)  # False: no saving can be estimated
    steps: int = 0  # the measured steps the totals are over (0: the device's, filled in)
    step_ns: int = 0  # the mean step time (with steps: the detector's own)
    stepped: bool = True  # per measured step; False: none measured, the work counts as one

    def per_step(self, ns: float) -> int:
        """A total over the steps, per step."""
        return round(ns / max(self.steps, 1))

    @property
    def saving_ns(self) -> int | None:
        """The estimated saving before ranking: the claims' time (None: unknown)."""
        return sum(c.ns for c in self.claims) if self.known else None

    @property
    def key(self) -> str:
        """The rule and where: the same in every run of the same code."""
        parts = [self.rule.id, self.rank, self.device_id, self.phase, self.module]
        parts += [self.range_path, self.extra_key]
        return "|".join("" if p is None else str(p) for p in parts)


def claims_of(
    frame: pl.DataFrame,
    pool: str,
    keys: Sequence[str],
    wanted: str,
    capacity: str,
    rank: int | None,
) -> tuple[Claim, ...]:
    """One claim per row of `frame`: `wanted` ns of `capacity` at (pool, rank, *keys).

    `wanted` is cut to `capacity` (a claim never wants more than there is) and
    rows that want nothing are left out.
    """
    claims = []
    for row in frame.iter_rows(named=True):
        have = max(int(row[capacity] or 0), 0)
        want = min(max(int(row[wanted] or 0), 0), have)
        if want:
            key: Key = (pool, rank, *(row[k] for k in keys))
            claims.append(Claim(key, want, have))
    return tuple(claims)


def spread(frame: pl.DataFrame, total: int, capacity: str) -> pl.DataFrame:
    """`frame` with `_want`: `total` shared among its rows in proportion to `capacity`,
    whole nanoseconds, each at most its row's capacity, adding up to min(total, the sum)."""
    have = frame[capacity].fill_null(0).clip(lower_bound=0).cast(pl.Int64).to_numpy()
    whole = int(have.sum())
    total = max(min(total, whole), 0)
    want = np.zeros(len(have), dtype=np.int64)
    if whole:
        want = np.floor(have * (total / whole)).astype(np.int64).clip(max=have)
        room = have - want  # the rest, a nanosecond each, to the rows with most room
        for i in np.argsort(-room, kind="stable")[: total - int(want.sum())]:
            want[i] += 1
    return frame.with_columns(_want=pl.Series(want, dtype=pl.Int64))
