"""Which rank each process of each report is.

The caller may know each report's rank (`nsysmap run` on a distributed job:
the rank each capture directory belongs to); those ranks are then the
declared ones. Otherwise a report may declare its rank: an nsys export in the environment nsys
launched it with (`RANK`, `OMPI_COMM_WORLD_RANK`, `PMI_RANK`, ...; meta keys
`rank` and `rank_variable`, nsysmap.read.nsys.nsys_env), a torch.profiler trace in
its `distributedInfo` (meta key `rank`). The declared ranks are used when
every attributed report declares one, each holds one process with GPU
operations, and no two declare the same rank. Otherwise every rank is
numbered in input order (names sorted naturally): a report with one process
is one rank (`file_order`); a report with several (`nsys profile torchrun
...`) gives one rank per process (`process`), ordered by first GPU, then
process id. A report that failed still takes one number, so that the ranks
of the others do not shift.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nsysmap.many.task import OK, Outcome, Unit

DECLARED, PROCESS, FILE_ORDER = "declared", "process", "file_order"


@dataclass(frozen=True)
class RankOf:
    """One rank: which input and process it is, and how its number was found."""

    rank: int
    index: int
    path: str
    unit: Unit
    source: str  # DECLARED, PROCESS or FILE_ORDER
    declared: int | None  # what the report said, if anything


def declared_rank(meta: dict[str, object]) -> int | None:
    """The rank a report's meta facts declare, or None (absent or not a whole number)."""
    value = meta.get("rank")
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def assign_ranks(
    outcomes: Sequence[Outcome], known: Mapping[int, int] | None = None
) -> tuple[list[RankOf], str]:
    """Every unit of every attributed report with its rank, and how the ranks were chosen.

    `known`: input index -> rank, as the caller knows them (replaces what reports say)."""
    ok = sorted((o for o in outcomes if o.status == OK), key=lambda o: o.index)
    declared = [known.get(o.index) if known else declared_rank(o.meta) for o in ok]
    reason = _why_not_declared(ok, declared)
    if reason is None:
        if known:
            return _declared(ok, declared), "as nsysmap run captured them (one directory per rank)"
        return _declared(ok, declared), "declared by each report"
    return _in_order(outcomes), f"numbered in input order ({reason})"


def _declared(ok: list[Outcome], declared: list[int | None]) -> list[RankOf]:
    ranks = [
        RankOf(rank, o.index, o.path, o.units[0], DECLARED, rank)
        for o, rank in zip(ok, declared, strict=True)
        if rank is not None  # always: a missing rank is a reason not to come here
    ]
    return sorted(ranks, key=lambda r: r.rank)


def _why_not_declared(ok: list[Outcome], declared: list[int | None]) -> str | None:
    """Why the declared ranks cannot be used (None: they can)."""
    if not ok:
        return "no report was attributed"
    several = [o for o in ok if len(o.units) > 1]
    if several:
        return f"{_name(several[0])} holds {len(several[0].units)} processes"
    missing = [o for o, d in zip(ok, declared, strict=True) if d is None]
    if missing:
        return f"{_name(missing[0])} declares no rank"
    seen: dict[int, Outcome] = {}
    known = [(o, d) for o, d in zip(ok, declared, strict=True) if d is not None]
    for o, d in known:
        if d in seen:
            return f"{_name(seen[d])} and {_name(o)} both declare rank {d}"
        seen[d] = o
    return None


def _in_order(outcomes: Sequence[Outcome]) -> list[RankOf]:
    ranks, next_rank = [], 0
    for o in sorted(outcomes, key=lambda o: o.index):
        if o.status != OK:
            next_rank += 1
            continue
        source = PROCESS if len(o.units) > 1 else FILE_ORDER
        said = declared_rank(o.meta)
        for unit in o.units:
            ranks.append(RankOf(next_rank, o.index, o.path, unit, source, said))
            next_rank += 1
    return ranks


def _name(outcome: Outcome) -> str:
    return outcome.path.rsplit("/", 1)[-1]
