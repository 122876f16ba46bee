"""Every output table of several reports, from their outcomes and ranks (pure).

The summary tables of one report (coverage, by_phase, ..., by_category) come
back per rank with a leading `rank` column, so each rank's rows add up to
that rank's GPU time; the waits tables (idle, stream_idle, launch_cost) per
rank too, each rank with its own GPUs' rows; then the cross-rank tables
(nsysmap.many.cross_rank), from what each rank's worker gave of its measured
operations (warm-up left out: nsysmap.many.measured), and `ranks`, which says
which input and process each rank is.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from nsysmap.core import rank_schemas, schemas
from nsysmap.many import cross_rank as across
from nsysmap.many.measured import MODULE_TABLES, unit_name
from nsysmap.many.rank_ids import RankOf
from nsysmap.many.rank_overlap import EXPOSED_COMM
from nsysmap.many.task import OK, UNIT_KEY, UNIT_STEPS, Outcome
from nsysmap.output.writer import PER_DEVICE


def by_rank(unit_schema: pl.Schema) -> pl.Schema:
    """A unit table's schema (keyed by pid, nsysmap.many.task) keyed by rank instead."""
    return rank_schemas.with_rank(
        pl.Schema({k: v for k, v in unit_schema.items() if k != UNIT_KEY})
    )


def labelled(outcomes: Sequence[Outcome], ranks: Sequence[RankOf], name: str) -> pl.DataFrame:
    """Table `name` of every attributed report, its pid column replaced by the rank."""
    rank_of = {(r.index, r.unit.pid): r.rank for r in ranks}
    frames = []
    for outcome in outcomes:
        if outcome.status != OK:
            continue
        frame = outcome.tables[name]
        pids = frame[UNIT_KEY].unique().to_list()
        mapping = {pid: rank_of[(outcome.index, pid)] for pid in pids}
        rank = pl.col(UNIT_KEY).replace_strict(mapping, return_dtype=pl.Int64).alias("rank")
        frames.append(frame.select(rank, pl.exclude(UNIT_KEY)))
    return pl.concat(frames) if frames else pl.DataFrame()


def ranks_table(ranks: Sequence[RankOf]) -> pl.DataFrame:
    """One row per rank: its input, process, devices and where its number came from."""
    rows = [
        {
            "rank": r.rank,
            "input": r.path,
            "pid": r.unit.pid,
            "device_ids": list(r.unit.devices),
            "rank_source": r.source,
            "declared_rank": r.declared,
            "ops": r.unit.ops,
            "time_ns": r.unit.time_ns,
        }
        for r in ranks
    ]
    return pl.DataFrame(rows, schema=rank_schemas.RANKS, orient="row").sort("rank")


def output_tables(outcomes: Sequence[Outcome], ranks: Sequence[RankOf]) -> dict[str, pl.DataFrame]:
    """Name -> frame of every table written next to the ops dataset."""
    tables = {"ranks": ranks_table(ranks)}
    for name, schema in PER_DEVICE.items():  # the summaries and the waits, as for one report
        tables[name] = _typed(labelled(outcomes, ranks, name), rank_schemas.with_rank(schema), name)
    steps = _typed(labelled(outcomes, ranks, "steps"), by_rank(UNIT_STEPS), "steps")
    exposed = labelled(outcomes, ranks, "exposed_comm")
    overlap = _typed(exposed, by_rank(EXPOSED_COMM), "exposed_comm")
    modules = {  # by_module and by_module_phase of the measured operations
        t.name: _typed(
            labelled(outcomes, ranks, unit_name(t)), rank_schemas.with_rank(t.schema), t.name
        )
        for t in MODULE_TABLES
    }
    per_step = across.rank_steps(steps)
    tables["rank_steps"] = per_step
    tables["stragglers"] = across.stragglers(per_step)
    every = [r.rank for r in ranks]
    tables["rank_module_phase"] = across.rank_module_phase(modules["by_module_phase"], every)
    tables["rank_module"] = across.rank_module(modules["by_module"], every)
    tables["rank_comm"] = across.rank_comm(per_step, overlap, every)
    return tables


def _typed(frame: pl.DataFrame, schema: pl.Schema, name: str) -> pl.DataFrame:
    """`frame` in `schema`, sorted by rank (an empty frame of it when there is nothing)."""
    if frame.is_empty() and not frame.columns:
        return schemas.empty(schema)
    return schemas.conform(frame, schema, name).sort("rank", maintain_order=True)
