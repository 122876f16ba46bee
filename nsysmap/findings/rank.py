"""Ranking findings by estimated saving, each nanosecond of the profile given once.

Findings are taken greedily: the one that would save most per step now is
next; it gets from each of its claims what is left at that key, and the keys
it drew on are left with less. A finding whose claims were cut by one ranked
above it names that one (`overlaps`), and its saving is what was left; so
the savings of all findings never add up to more than the time they are
taken from, and no two findings count the same time. Findings whose saving
cannot be told come last, in key order.
"""

from __future__ import annotations

from dataclasses import dataclass

from nsysmap.findings.model import Finding, Key


@dataclass(frozen=True)
class Ranked:
    """A finding in its place: its saving after those above it (a total over the steps;
    None: unknown) and the priorities of the findings above that took part of its time."""

    finding: Finding
    priority: int
    saving_ns: int | None
    overlaps: tuple[int, ...]


def ranked(findings: list[Finding]) -> list[Ranked]:
    """`findings` in order of saving per step, largest first (see the module docstring)."""
    left: dict[Key, int] = {}
    for f in findings:
        for c in f.claims:
            left[c.key] = min(left.get(c.key, c.capacity), c.capacity)
    takers: dict[Key, list[int]] = {}
    pending = sorted((f for f in findings if f.known), key=lambda f: f.key)
    out: list[Ranked] = []
    while pending:
        best = max(pending, key=lambda f: (f.per_step(_available(f, left)), _neg_key(f)))
        pending.remove(best)
        priority, got, above = len(out) + 1, 0, set[int]()
        for c in best.claims:
            part = min(c.ns, left[c.key])
            if part < c.ns:
                above.update(takers.get(c.key, ()))
            left[c.key] -= part
            got += part
            if part:
                takers.setdefault(c.key, []).append(priority)
        out.append(Ranked(best, priority, got, tuple(sorted(above))))
    unknown = sorted((f for f in findings if not f.known), key=lambda f: f.key)
    return out + [Ranked(f, len(out) + i + 1, None, ()) for i, f in enumerate(unknown)]


def _available(f: Finding, left: dict[Key, int]) -> int:
    """What `f` could still get from its claims."""
    return sum(min(c.ns, left[c.key]) for c in f.claims)


def _neg_key(f: Finding) -> tuple[int, ...]:
    """Ties go to the finding whose key sorts first (max() keeps the largest)."""
    return (*(-ord(ch) for ch in f.key), 1)
