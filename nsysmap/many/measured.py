"""What the cross-rank tables read of each rank: its measured work, warm-up left out.

Attribution marks warm-up work itself (`warmup` in the OPS rows: launched
inside a warm-up range, whatever its step and phase; nsysmap.attribution), so
the mark is there without the structure model, which several reports do not
build. Each rank's findings leave that work out (nsysmap.findings.inputs),
and so do the answers across ranks: `rank_steps`, `stragglers`,
`rank_module_phase`, `rank_module` and `rank_comm` read only the operations
not marked warm-up (MEASURED). The per-rank summaries (by_phase, by_module,
...; the waits) keep every operation, as one report's do.

`module_queries` and `module_tables` give each process's by_module and
by_module_phase over its measured operations: the declared tables of
nsysmap.summaries.summarise, combined as for one report (inclusive time
and the modules above those that launched work included), so that without
warm-up they are the rank's own by_module and by_module_phase. `left_out`
says how much work the answers leave out, from the written tables.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from nsysmap.summaries.summarise import SUMMARY_TABLES, SummaryTable, combine_summaries

MEASURED = ~pl.col("warmup").fill_null(False)  # not warm-up work: what the answers read
MODULES = ("by_module", "by_module_phase")  # the summaries the module spreads compare
MODULE_TABLES = tuple(t for t in SUMMARY_TABLES if t.name in MODULES)
PREFIX = "measured_"  # a unit table of these summaries: measured_by_module, ...


def module_queries(measured: pl.LazyFrame) -> dict[str, pl.LazyFrame]:
    """Per MODULE_TABLES table, the groups of `measured` (OPS rows) by pid, device and
    the table's keys: ops, time and the table's extra columns (to collect with others)."""
    return {unit_name(t): t.grouped(measured, by=("pid",)) for t in MODULE_TABLES}


def module_tables(groups: Mapping[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """The collected `module_queries` as each process's summaries (pid first): per
    process, one report's by_module and by_module_phase of its measured operations."""
    made: dict[str, list[pl.DataFrame]] = {t.name: [] for t in MODULE_TABLES}
    pids = pl.concat([groups[unit_name(t)]["pid"] for t in MODULE_TABLES]).unique().sort()
    for pid in pids:
        part = {
            t.name: groups[unit_name(t)].filter(pl.col("pid") == pid).drop("pid")
            for t in MODULE_TABLES
        }
        summaries = combine_summaries([part], tables=MODULE_TABLES).tables()
        for t in MODULE_TABLES:
            made[t.name].append(
                summaries[t.name].select(pl.lit(pid, pl.Int64).alias("pid"), pl.all())
            )
    return {
        unit_name(t): pl.concat(made[t.name])
        if made[t.name]
        else pl.DataFrame(schema={"pid": pl.Int64, **t.schema})
        for t in MODULE_TABLES
    }


def unit_name(table: SummaryTable) -> str:
    """The name of a unit table of `table` over measured operations (`measured_by_module`)."""
    return f"{PREFIX}{table.name}"


def left_out(ranks: pl.DataFrame | None, rank_comm: pl.DataFrame) -> dict[str, int] | None:
    """The warm-up work the answers across ranks leave out: each rank's operations
    (`ranks`) less those `rank_comm` counts; None when there is none (or no `ranks`)."""
    if ranks is None or ranks.is_empty():
        return None
    both = ranks.join(rank_comm, on="rank", how="left", suffix="_measured").select(
        "rank",
        ops=pl.col("ops") - pl.col("ops_measured").fill_null(0),
        time_ns=pl.col("time_ns") - pl.col("time_ns_measured").fill_null(0),
    )
    warm = both.filter(pl.col("ops") > 0)
    if warm.is_empty():
        return None
    return {
        "ops": int(warm["ops"].sum()),
        "time_ns": int(warm["time_ns"].sum()),
        "ranks": warm.height,
    }
