"""Exposed communication per collective and rank, from a multi-rank ops dataset.

For `nsysmap report` on a multi-rank output (nsysmap.many.ranks_section): per
rank and collective (all_reduce, all_gather, ...: nsysmap.report.collectives),
the communication kernels' calls and time, and how much of it is hidden
behind compute and how much exposed, by nsysmap's one definition
(nsysmap.summaries.comm_overlap.hidden_communication, that of `overlap.parquet`
and `rank_comm.parquet`), so each rank's rows add up to its `rank_comm`
communication kernel time: as every cross-rank answer, they leave out kernels
marked warm-up (nsysmap.many.measured). One rank is read at a time. Communication that is
not a GPU kernel (gloo's CPU operators in a trace without GPU activity) has no
stream to be hidden on: it is counted apart, not split.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from nsysmap.many.measured import MEASURED
from nsysmap.report.collectives import collective
from nsysmap.report.format import ms, pct, table
from nsysmap.report.report_files import older_than
from nsysmap.summaries.comm_overlap import COMM, hidden_communication

COLUMNS = ("rank", "collective", "calls", "time_ns", "hidden_ns", "exposed_ns")


def rank_collectives(ops: pl.LazyFrame, ranks: list[int]) -> pl.DataFrame:
    """Per rank and collective: calls, time, hidden and exposed time of its kernels."""
    frames = []
    for rank in ranks:
        kernels = hidden_communication(
            ops.filter(pl.col("rank") == rank), keep=["name", "range_path", "warmup"]
        ).filter(MEASURED)
        if kernels.is_empty():
            continue
        frames.append(
            kernels.with_columns(collective=collective(pl.col("name"), pl.col("range_path")))
            .group_by("rank", "collective")
            .agg(
                calls=pl.len().cast(pl.Int64),
                time_ns=pl.col("dur_ns").sum(),
                hidden_ns=pl.col("hidden_ns").sum(),
                exposed_ns=pl.col("exposed_ns").sum(),
            )
        )
    if not frames:
        schema = {c: pl.Int64 for c in COLUMNS} | {"collective": pl.String}
        return pl.DataFrame(schema=schema)
    return pl.concat(frames).select(COLUMNS).sort(["rank", "exposed_ns"], descending=[False, True])


def not_kernels_ns(ops: pl.LazyFrame) -> int:
    """Time of communication operations that are not GPU kernels (CPU operators, ...)."""
    said = ops.filter((pl.col("category") == "communication") & ~COMM & MEASURED).select(
        pl.col("dur_ns").sum()
    )
    return int(said.collect().item() or 0)


# The output schema whose cross-rank tables first left warm-up work out.
MEASURED_ONLY = (1, 12)


def _with_warmup(ops: pl.LazyFrame, version: object) -> pl.LazyFrame:
    """`ops` with the `warmup` mark the cross-rank tables of output schema `version`
    went by: none before MEASURED_ONLY, whose tables counted warm-up work with the
    rest (and before schema 1.5 the operations carry no mark at all)."""
    if "warmup" in ops.collect_schema().names() and not older_than(version, MEASURED_ONLY):
        return ops
    return ops.with_columns(warmup=pl.lit(False))


def collectives_section(run_dir: Path, ranks: list[int], version: object) -> str:
    """The report's section: exposed communication per collective and rank (Markdown),
    counted as the output's own `rank_comm` counts it (warm-up left out from output
    schema 1.12; `version`: the manifest's `output_schema_version`)."""
    ops = _with_warmup(pl.scan_parquet(Path(run_dir) / "ops", hive_partitioning=True), version)
    found = rank_collectives(ops, ranks)
    out = ["### Exposed communication per collective and rank", ""]
    if found.is_empty():
        out.append("No communication kernels in any rank.")
    else:
        rows = [
            [
                str(r["rank"]),
                r["collective"],
                f"{r['calls']:,}",
                ms(r["time_ns"]),
                ms(r["exposed_ns"]),
                pct(r["exposed_ns"] / r["time_ns"] if r["time_ns"] else None),
            ]
            for r in found.iter_rows(named=True)
        ]
        header = ["rank", "collective", "calls", "time", "exposed", "exposed share"]
        out += table(header, rows)
    other = not_kernels_ns(ops)
    if other:
        out.append(
            f"Communication that is not GPU kernels ({ms(other)} over every rank, such as "
            "gloo's CPU operators) is not split into hidden and exposed: it has no GPU stream."
        )
    return "\n".join(out).rstrip() + "\n"
