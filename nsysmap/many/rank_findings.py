"""What to fix first in a job of several ranks: each rank's findings and the job's.

Each rank's findings come from its own operations (the part its worker
wrote) and waits, as one report's would, but without its structure (a rank
without step ranges is measured by its labels, not by the structure's steps
or measured region); the job's from the cross-rank
tables (the straggler rule). All of them are ranked together
(nsysmap.findings), each with its `rank`, and written as findings.parquet.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from nsysmap.core.units import cpu_trace
from nsysmap.findings import Inputs, findings_table, job_inputs
from nsysmap.many.rank_ids import RankOf
from nsysmap.many.task import Outcome

WAITS = ("launch_cost", "idle")
ACROSS = ("rank_steps", "stragglers", "rank_module_phase")


def job_findings(
    outcomes: Sequence[Outcome], ranks: Sequence[RankOf], tables: dict[str, pl.DataFrame]
) -> pl.DataFrame:
    """findings.parquet of several ranks, from their parts and the tables of the job."""
    by_index = {o.index: o for o in outcomes}
    per_rank = tuple(_rank_inputs(r, by_index[r.index], tables) for r in ranks)
    across = {name: tables[name] for name in ACROSS if name in tables}
    return findings_table([*per_rank, job_inputs(across, per_rank)])


def _rank_inputs(r: RankOf, outcome: Outcome, tables: dict[str, pl.DataFrame]) -> Inputs:
    mine = {n: tables[n].filter(pl.col("rank") == r.rank).drop("rank") for n in WAITS}
    names = outcome.device_names
    devices = pl.DataFrame(
        {"device_id": list(names), "name": list(names.values())},
        schema={"device_id": pl.Int64, "name": pl.String},
    )
    cpu = cpu_trace(outcome.meta)
    ops = pl.scan_parquet(r.unit.part)
    return Inputs(ops, mine["launch_cost"], mine["idle"], devices, cpu, rank=r.rank)
