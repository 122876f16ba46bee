"""Ranking findings by estimated saving, each nanosecond of the profile given once.

The time findings claim is handed out greedily, tier by tier (the rules'
`tier`): first the rules that name a cause of other findings' time (the
straggler, whose wait is the other ranks' exposed communication), then the
specific rules, then the general ones (launch_bound), which so get only what
no specific finding explains (a launch-bound optimizer phase is the
per-parameter optimizer's). Within a tier, the finding that would save most
per step now is served next, and takes from each of its claims what is left
at that key. A finding whose claims were cut names the
findings that took that time first (`overlaps`), and its saving is what was
left: the savings of all findings never add up to more than the time they
are taken from, and no two findings count the same nanosecond. The findings
are then ranked by that saving per step, largest first (ties: by key); those
whose saving cannot be told come last, in key order.
"""

from __future__ import annotations

from dataclasses import dataclass

from nsysmap.findings.finding import Claim, Finding, Key


@dataclass(frozen=True)
class Ranked:
    """A finding in its place: its saving after the findings served before it (a total
    over the steps; None: unknown), the parts of its claims it got, and the priorities
    of the findings that took part of its time first."""

    finding: Finding
    priority: int
    saving_ns: int | None
    taken: tuple[Claim, ...]
    overlaps: tuple[int, ...]


@dataclass
class _Served:
    finding: Finding
    taken: list[Claim]
    before: set[int]  # positions (in serving order) of the findings that cut its claims

    @property
    def saving_ns(self) -> int:
        return sum(c.ns for c in self.taken)


def ranked(findings: list[Finding]) -> list[Ranked]:
    """`findings` in order of saving per step, largest first (see the module docstring)."""
    left: dict[Key, int] = {}
    for f in findings:
        for c in f.claims:
            left[c.key] = min(left.get(c.key, c.capacity), c.capacity)
    takers: dict[Key, list[int]] = {}
    served: list[_Served] = []
    for tier in sorted({f.rule.tier for f in findings}):
        pending = sorted((f for f in findings if f.known and f.rule.tier == tier), key=_key)
        while pending:
            best = max(pending, key=lambda f: (f.per_step(_available(f, left)), _neg_key(f)))
            pending.remove(best)
            served.append(_serve(best, len(served), left, takers))
    order = sorted(range(len(served)), key=lambda i: (-_per_step(served[i]), served[i].finding.key))
    priority = {i: n for n, i in enumerate(order, start=1)}
    out = [
        Ranked(
            served[i].finding,
            priority[i],
            served[i].saving_ns,
            tuple(served[i].taken),
            tuple(sorted(priority[j] for j in served[i].before)),
        )
        for i in order
    ]
    unknown = sorted((f for f in findings if not f.known), key=_key)
    return out + [Ranked(f, len(out) + n, None, (), ()) for n, f in enumerate(unknown, start=1)]


def _serve(
    f: Finding, position: int, left: dict[Key, int], takers: dict[Key, list[int]]
) -> _Served:
    """`f` served: from each claim what is left there, noting who took the rest."""
    done = _Served(f, [], set())
    for c in f.claims:
        part = min(c.ns, left[c.key])
        if part < c.ns:
            done.before.update(takers.get(c.key, ()))
        left[c.key] -= part
        if part:
            done.taken.append(Claim(c.key, part, c.capacity))
            takers.setdefault(c.key, []).append(position)
    return done


def _available(f: Finding, left: dict[Key, int]) -> int:
    """What `f` could still get from its claims."""
    return sum(min(c.ns, left[c.key]) for c in f.claims)


def _per_step(s: _Served) -> int:
    return s.finding.per_step(s.saving_ns)


def _key(f: Finding) -> str:
    return f.key


def _neg_key(f: Finding) -> tuple[int, ...]:
    """Ties go to the finding whose key sorts first (max() keeps the largest)."""
    return (*(-ord(ch) for ch in f.key), 1)
