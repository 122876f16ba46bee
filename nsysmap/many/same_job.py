"""Do several reports look like the ranks of one job? The reasons to doubt it (pure).

`nsysmap attribute DIR` takes every report in DIR as a rank of one job. A
folder can hold reports of unrelated runs; their ranks would then be
compared as if they waited for each other. Each rule below names one sign
that two ranks did not run the same program together; none proves it (a
job may mix GPU models), so a doubt is a warning, printed and written into
the outputs, never a refusal.

    gpu_models    the ranks' GPUs (the ones their operations ran on) are of
                  different models
    profilers     the reports come from different profilers (nsys, torch.profiler)
    world_sizes   the reports declare different world sizes
    declared      two reports declare the same rank
    steps         every rank has step numbers, and no step number is common
                  to all of them
    kernels       a rank spends less than MIN_SHARED_KERNEL_TIME of its GPU time
                  in kernels the first rank also runs, or the first rank less
                  than that in kernels this rank runs
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import polars as pl

from nsysmap.core.scalars import to_float
from nsysmap.many.rank_ids import RankOf, declared_rank
from nsysmap.many.task import OK, Outcome

# Ranks of one program share most of their kernels by time (data-parallel: all
# of them; pipeline stages and experts: the GEMMs and collectives at least).
MIN_SHARED_KERNEL_TIME = 0.5
SHOWN = 3  # values named in one doubt, at most
ONE_JOB_DOUBTS = "one_job_doubts"  # the manifest key that lists them
Rule = Callable[[Sequence[Outcome], Sequence[RankOf], dict[str, pl.DataFrame]], str | None]


def doubts(
    outcomes: Sequence[Outcome], ranks: Sequence[RankOf], tables: dict[str, pl.DataFrame]
) -> list[str]:
    """Why these ranks may not be one job (empty: nothing says so); one line each."""
    if len({r.rank for r in ranks}) < 2:
        return []
    ok = [o for o in outcomes if o.status == OK]
    found = [rule(ok, ranks, tables) for rule in RULES]
    return [doubt for doubt in found if doubt]


def _gpu_models(
    ok: Sequence[Outcome], ranks: Sequence[RankOf], _tables: dict[str, pl.DataFrame]
) -> str | None:
    names = {o.index: o.device_names for o in ok}
    first: dict[str, int] = {}  # model -> the first rank using it
    for r in sorted(ranks, key=lambda r: r.rank):
        for device in r.unit.devices:
            model = names.get(r.index, {}).get(device)
            if model:
                first.setdefault(model, r.rank)
    if len(first) < 2:
        return None
    return "the ranks run on different GPU models (" + _listed(first, "rank ") + ")"


def _differing_meta(key: str, what: str) -> Rule:
    """The rule: the reports' meta `key` takes more than one value (`what` names it)."""

    def rule(
        ok: Sequence[Outcome], _ranks: Sequence[RankOf], _tables: dict[str, pl.DataFrame]
    ) -> str | None:
        first = _first_values(ok, key)
        if len(first) < 2:
            return None
        return f"the reports {what} (" + _listed(first, "") + ")"

    return rule


_profilers = _differing_meta("backend", "come from different profilers")
_world_sizes = _differing_meta("world_size", "declare different world sizes")


def _first_values(ok: Sequence[Outcome], key: str) -> dict[str, str]:
    """Value of meta `key` -> the name of the first report declaring it."""
    first: dict[str, str] = {}
    for o in ok:
        value = o.meta.get(key)
        if value not in (None, ""):
            first.setdefault(str(value), o.path.rsplit("/", 1)[-1])
    return first


def _listed(first: dict[str, int] | dict[str, str], label: str) -> str:
    shown = [f"{value} in {label}{where}" for value, where in first.items()]
    more = len(shown) - SHOWN
    return "; ".join(shown[:SHOWN]) + (f"; {more} more" if more > 0 else "")


def _steps(
    _ok: Sequence[Outcome], ranks: Sequence[RankOf], tables: dict[str, pl.DataFrame]
) -> str | None:
    steps = tables.get("rank_steps")
    if steps is None or steps.is_empty():
        return None
    numbered = steps.filter(pl.col("step").is_not_null())
    per_rank = numbered.group_by("rank").agg(pl.col("step").unique())
    if per_rank.height < len({r.rank for r in ranks}):
        return None  # a rank without step numbers: nothing to compare
    shared = (
        numbered.group_by("step")
        .agg(pl.col("rank").n_unique())
        .filter(pl.col("rank") == per_rank.height)
    )
    if shared.height:
        return None
    spans = per_rank.sort("rank").head(SHOWN).iter_rows()
    named = "; ".join(f"rank {rank}: {_span(s)}" for rank, s in spans)
    return f"no step number is common to all ranks ({named})"


def _span(steps: list[int]) -> str:
    low, high = min(steps), max(steps)
    return f"step {low}" if low == high else f"steps {low}-{high}"


def _declared_twice(
    ok: Sequence[Outcome], _ranks: Sequence[RankOf], _tables: dict[str, pl.DataFrame]
) -> str | None:
    seen: dict[int, str] = {}
    for o in ok:
        rank, name = declared_rank(o.meta), o.path.rsplit("/", 1)[-1]
        if rank is not None and rank in seen:
            return f"{seen[rank]} and {name} both declare rank {rank}"
        if rank is not None:
            seen[rank] = name
    return None


def _kernels(
    _ok: Sequence[Outcome], ranks: Sequence[RankOf], tables: dict[str, pl.DataFrame]
) -> str | None:
    by_kernel = tables.get("by_kernel")
    if by_kernel is None or by_kernel.is_empty():
        return None
    time = by_kernel.group_by("rank", "name").agg(pl.col("time_ns").sum())
    first = min(r.rank for r in ranks)
    reference = time.filter(pl.col("rank") == first).select("name", ref_ns="time_ns")
    ref_total = to_float(reference["ref_ns"].sum())
    if not ref_total:
        return None
    shares = (
        time.join(reference, on="name", how="left")
        .group_by("rank")
        .agg(
            (
                pl.col("time_ns").filter(pl.col("ref_ns").is_not_null()).sum()
                / pl.col("time_ns").sum()
            ).alias("own"),
            (pl.col("ref_ns").sum() / ref_total).alias("theirs"),
        )
        .with_columns(shared=pl.min_horizontal("own", "theirs"))
        .filter((pl.col("rank") != first) & (pl.col("shared") < MIN_SHARED_KERNEL_TIME))
        .sort("shared", "rank")
    )
    if shares.is_empty():
        return None
    worst = shares.row(0, named=True)
    others = f" (and {shares.height - 1} more ranks)" if shares.height > 1 else ""
    return (
        f"rank {worst['rank']} and rank {first} share kernels for only "
        f"{worst['shared']:.0%} of their GPU time{others}"
    )


RULES: tuple[Rule, ...] = (
    _gpu_models,
    _profilers,
    _world_sizes,
    _declared_twice,
    _steps,
    _kernels,
)
