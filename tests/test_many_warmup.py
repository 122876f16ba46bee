"""The answers across ranks leave warm-up work out, as each rank's own findings do.

Two ranks of one job, one export each, written here millisecond by
millisecond: five steps (`ProfilerStep#0` to `#4`), the first two inside a
`warmup` range. Each step runs one compute kernel inside module `fc`
(phase forward), then one NCCL all-reduce after it on another stream (never
hidden). Rank 0 warms up slowly (15 ms of compute per warm-up step, as a
compile or an autotuner would) and then computes fast; rank 1 is the slow
rank of the measured steps and rank 0 waits for it in the all-reduce:

    rank  steps 0-1 (warm-up)       steps 2-4 (measured)
     0    compute 15, comm  1 ms    compute 4, comm 6 ms
     1    compute  2, comm 14 ms    compute 8, comm 2 ms

Counted with the warm-up, rank 0 would be the slowest rank (42 ms of compute
against 28 ms) over steps 0-4; over the measured steps 2-4 it is rank 1
(24 ms against 12 ms), and rank 0 waits 4 ms per step for it. Every figure
expected below comes from this design, not from nsysmap. Each report is
attributed in this process (`attribute_one`, what a Dask worker runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from devtools.synth import SynthExport
from nsysmap.core.schemas import OUTPUT_SCHEMA_VERSION
from nsysmap.many.rank_collectives import rank_collectives
from tests.many_jobs import ranked_job

MS = 1_000_000
PID, TID, DEVICE, COMPUTE, NCCL = 100, 100, 0, 7, 20
STEP_MS, WARM = 20, (0, 1)
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm *, unsigned long, ncclWork *)"
# rank -> per step: (compute ms, communication ms)
PLAN = {
    0: [(15, 1), (15, 1), (4, 6), (4, 6), (4, 6)],
    1: [(2, 14), (2, 14), (8, 2), (8, 2), (8, 2)],
}
MEASURED = [2, 3, 4]


def _rank_export(path: Path, steps: list[tuple[int, int]]) -> Path:
    b = SynthExport()
    b.thread(PID, TID, "python")
    b.gpu(DEVICE)
    b.range(PID, TID, 0, len(WARM) * STEP_MS, "warmup")
    for step, (compute, comm) in enumerate(steps):
        start = step * STEP_MS
        b.range(PID, TID, start, start + STEP_MS, f"ProfilerStep#{step}")
        b.range(PID, TID, start, start + 1, "nsysmap:phase:forward")
        b.range(PID, TID, start, start + 0.5, "nsysmap:fwd:Linear:fc")
        corr = 2 * step + 1
        b.launch(PID, TID, start + 0.1, start + 0.2, corr)
        b.kernel(PID, DEVICE, COMPUTE, start + 1, start + 1 + compute, corr, name="sm90_gemm")
        b.launch(PID, TID, start + 0.6, start + 0.7, corr + 1)
        at = start + 1 + compute
        b.kernel(PID, DEVICE, NCCL, at, at + comm, corr + 1, name=ALL_REDUCE)
    return b.write(path)


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The two reports attributed and ranked, their tables and summary, written as
    `nsysmap attribute` writes them, and `nsysmap report` of that output."""
    root = tmp_path_factory.mktemp("warm_ranks")
    paths = [_rank_export(root / f"rank{r}.sqlite", PLAN[r]) for r in sorted(PLAN)]
    return ranked_job(paths, root)


def _ops(out: Path) -> pl.LazyFrame:
    return pl.scan_parquet(out / "ops", hive_partitioning=True)


def _by_rank(frame: pl.DataFrame, *columns: str) -> dict[int, tuple]:
    return {row[0]: tuple(row[1:]) for row in frame.select("rank", *columns).sort("rank").rows()}


def test_the_warm_up_steps_are_marked(job: dict[str, Any]) -> None:
    ops = _ops(job["out"]).collect()
    warm = ops.filter(pl.col("warmup")).group_by("rank").agg(pl.col("step").unique().sort())
    assert dict(warm.rows()) == {0: list(WARM), 1: list(WARM)}


def test_rank_steps_and_stragglers_cover_the_measured_steps(job: dict[str, Any]) -> None:
    steps = job["tables"]["rank_steps"]
    assert steps["step"].unique().sort().to_list() == MEASURED
    got = steps.group_by("rank").agg(pl.col("compute_ns", "comm_ns", "collective_wait_ns").sum())
    assert _by_rank(got, "compute_ns", "comm_ns", "collective_wait_ns") == {
        0: (12 * MS, 18 * MS, 12 * MS),
        1: (24 * MS, 6 * MS, 0),
    }
    stragglers = job["tables"]["stragglers"]
    assert stragglers["step"].to_list() == MEASURED
    assert set(stragglers["slowest_rank"]) == {1} and set(stragglers["fastest_rank"]) == {0}
    assert stragglers["straggler_cost_ns"].to_list() == [4 * MS] * 3


def test_rank_comm_counts_the_measured_work(job: dict[str, Any]) -> None:
    comm = job["tables"]["rank_comm"]
    columns = ("ops", "time_ns", "compute_ns", "comm_ns", "overlapped_ns", "exposed_ns")
    assert _by_rank(comm, *columns, "comm_busy_ns", "collective_wait_ns") == {
        0: (6, 30 * MS, 12 * MS, 18 * MS, 0, 18 * MS, 18 * MS, 12 * MS),
        1: (6, 30 * MS, 24 * MS, 6 * MS, 0, 6 * MS, 6 * MS, 0),
    }


def test_the_module_spreads_compare_the_measured_work(job: dict[str, Any]) -> None:
    for name in ("rank_module_phase", "rank_module"):
        fc = job["tables"][name].filter(pl.col("module") == "fc").row(0, named=True)
        assert (fc["slowest_rank"], fc["max_ns"], fc["min_ns"]) == (1, 24 * MS, 12 * MS), name
        assert fc["excess_ns"] == 6 * MS, name


def test_each_ranks_own_tables_keep_the_warm_up(job: dict[str, Any]) -> None:
    """The summaries written per rank, as for one report, still hold every operation."""
    by_step = job["tables"]["by_step"]
    assert sorted(by_step["step"].unique()) == [0, 1, 2, 3, 4]
    totals = by_step.group_by("rank").agg(pl.col("time_ns").sum())
    assert _by_rank(totals, "time_ns") == {0: (62 * MS,), 1: (62 * MS,)}
    by_module = job["tables"]["by_module"].filter(pl.col("module") == "fc")
    assert _by_rank(by_module, "time_ns") == {0: (42 * MS,), 1: (28 * MS,)}


def test_collectives_per_rank_leave_the_warm_up_out(job: dict[str, Any]) -> None:
    got = rank_collectives(_ops(job["out"]), [0, 1])
    assert _by_rank(got, "collective", "calls", "time_ns", "exposed_ns") == {
        0: ("all_reduce", 3, 18 * MS, 18 * MS),
        1: ("all_reduce", 3, 6 * MS, 6 * MS),
    }


@pytest.mark.parametrize("text", ["terminal", "markdown"])
def test_the_lines_name_the_measured_steps_and_the_warm_up(job: dict[str, Any], text: str) -> None:
    said = job[text]
    assert "Slowest rank: 1, compute 24.000 ms over steps 2-4 against a median of 18.000" in said
    assert "fc" in said and "on rank 1: 24.000 ms with the modules inside it over steps 2-4" in said
    assert "Straggler cost: 12.000 ms over 3 step(s) (steps 2-4)" in said
    assert "Warm-up left out, as in each rank's findings: 8 operations, 64.000 ms in 2" in said
    assert "steps 0-4" not in said


def test_the_straggler_finding_is_that_of_the_measured_steps(job: dict[str, Any]) -> None:
    found = job["tables"]["findings"].filter(pl.col("rule") == "straggler")
    row = found.row(0, named=True)
    assert (found.height, row["rank"], row["module"]) == (1, 1, "fc")
    assert (row["steps"], row["saving_ns_per_step"]) == (3, 4 * MS)  # rank 0's wait per step


def test_an_earlier_outputs_collectives_keep_the_warm_up(job: dict[str, Any], tmp_path) -> None:
    """An output of schema 1.11 counted warm-up in its cross-rank tables: the report
    reads its collectives as its `rank_comm` counted them, warm-up included."""
    import json
    import shutil

    from nsysmap.many.rank_collectives import collectives_section

    now = collectives_section(job["out"], [0, 1], OUTPUT_SCHEMA_VERSION)
    earlier = tmp_path / "earlier"
    shutil.copytree(job["out"], earlier)
    manifest = json.loads((earlier / "manifest.json").read_text())
    assert manifest["output_schema_version"] == OUTPUT_SCHEMA_VERSION
    manifest["output_schema_version"] = "1.11"
    (earlier / "manifest.json").write_text(json.dumps(manifest))
    then = collectives_section(earlier, [0, 1], manifest["output_schema_version"])
    calls = {
        text: [line.split("|")[3].strip() for line in text.splitlines() if "all_reduce" in line]
        for text in (now, then)
    }
    assert calls[now] == ["3", "3"]  # the measured steps' all-reduces
    assert calls[then] == ["5", "5"]  # and the two warm-up steps'
