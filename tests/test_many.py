"""`nsysmap attribute DIR` on eight synthetic rank reports, on a 2-worker Dask cluster.

Rank 3 is slow in one layer (`transformer.h.1`, three times slower there)
and rank 6's file is truncated. What is checked comes from the job's design
(which rank and layer are slow, who waits for whom) or from plain SQL over
the exports (tests/corpus.py), never from nsysmap itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow.dataset as ds
import pytest
from distributed import LocalCluster

from devtools.synth.ddp_ranks import Job, rank_file, write_rank_exports
from nsysmap.core.errors import ExitCode
from nsysmap.flow.verbs import analyse
from nsysmap.sources.reading import load_profile
from nsysmap.summaries.summarise import SUMMARY_SCHEMAS
from nsysmap.waits.tables import SCHEMAS as WAITS_SCHEMAS
from tests.cli_runner import invoke
from tests.corpus import independent_gpu_totals

pytestmark = pytest.mark.dask  # a local Dask cluster per test

WORLD, SLOW_RANK, CORRUPT_RANK = 8, 3, 6
SLOW_LAYER = "transformer.h.1"
JOB = Job(world=WORLD, slow_rank=SLOW_RANK, slow_module=SLOW_LAYER, module_factor=3.0, n_layer=2)
GOOD_RANKS = [r for r in range(WORLD) if r != CORRUPT_RANK]


@pytest.fixture(scope="module")
def rank_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("ranks")
    write_rank_exports(directory, JOB, 600)
    corrupt = rank_file(directory, CORRUPT_RANK)
    corrupt.write_bytes(corrupt.read_bytes()[:20_000])  # truncated mid-file
    return directory


@pytest.fixture(scope="module")
def result(rank_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("out")
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        code, stdout, stderr = invoke(
            ["attribute", str(rank_dir), "-o", str(out), "--scheduler", address]
        )
    manifest = json.loads((out / "manifest.json").read_text())
    return {"out": out, "code": code, "stdout": stdout, "stderr": stderr, "manifest": manifest}


def test_corrupt_report_is_named_and_the_others_are_written(result: dict[str, Any]) -> None:
    assert result["code"] == ExitCode.SOME_FAILED
    assert "1 of 8 reports failed (rank06.sqlite)" in result["stderr"]
    assert "rank06.sqlite: truncated SQLite file" in result["stdout"]
    inputs = result["manifest"]["inputs"]
    assert [Path(i["path"]).name for i in inputs] == [f"rank{r:02d}.sqlite" for r in range(WORLD)]
    failed = [i for i in inputs if i["status"] != "ok"]
    assert [Path(i["path"]).name for i in failed] == ["rank06.sqlite"]
    assert failed[0]["exit_code"] == ExitCode.UNUSABLE_INPUT and failed[0]["ranks"] == []
    parts = sorted(p.parent.name for p in (result["out"] / "ops").glob("rank=*/part-0.parquet"))
    assert parts == sorted(f"rank={r}" for r in GOOD_RANKS)


def test_ranks_come_from_the_launch_environment(result: dict[str, Any]) -> None:
    ranks = pl.read_parquet(result["out"] / "ranks.parquet")
    assert ranks["rank"].to_list() == GOOD_RANKS
    assert ranks["rank_source"].unique().to_list() == ["declared"]
    names = [Path(p).name for p in ranks["input"]]
    assert names == [f"rank{r:02d}.sqlite" for r in GOOD_RANKS]
    assert result["manifest"]["rank_rule"] == "declared by each report"
    assert result["manifest"]["one_job_doubts"] == []  # one job's ranks: no warning
    assert "nsysmap: warning" not in result["stderr"]


def test_slow_rank_and_layer_are_named(result: dict[str, Any]) -> None:
    text = result["stdout"]
    assert f"Slowest rank: {SLOW_RANK}," in text
    assert f"Slowest layer: {SLOW_LAYER} (GPT2Block) on rank {SLOW_RANK}:" in text
    spread = pl.read_parquet(result["out"] / "rank_module_phase.parquet")
    top = spread.row(0, named=True)
    assert top["module"].startswith(SLOW_LAYER + ".") and top["slowest_rank"] == SLOW_RANK
    layer = pl.read_parquet(result["out"] / "rank_module.parquet").filter(
        pl.col("module") == SLOW_LAYER
    )
    assert layer["slowest_rank"].to_list() == [SLOW_RANK]
    assert layer["max_ns"][0] > 2 * layer["median_ns"][0]  # three times slower there


def test_every_rank_waits_for_the_slow_one(result: dict[str, Any]) -> None:
    steps = pl.read_parquet(result["out"] / "rank_steps.parquet")
    waits = steps.filter(pl.col("step").is_not_null())
    assert waits.filter(pl.col("rank") == SLOW_RANK)["collective_wait_ns"].max() == 0
    assert waits.filter(pl.col("rank") != SLOW_RANK)["collective_wait_ns"].min() > 0
    stragglers = pl.read_parquet(result["out"] / "stragglers.parquet").drop_nulls("step")
    assert set(stragglers["slowest_rank"]) == {SLOW_RANK}
    assert (stragglers["straggler_cost_ns"] > 0).all()
    assert (stragglers["ranks"] == len(GOOD_RANKS)).all()


def test_time_is_conserved_per_rank(result: dict[str, Any], rank_dir: Path) -> None:
    out = result["out"]
    expected = {r: independent_gpu_totals(rank_file(rank_dir, r))[0] for r in GOOD_RANKS}
    ops = pl.scan_parquet(out / "ops", hive_partitioning=True)
    per_rank = ops.group_by("rank").agg(pl.len(), pl.col("dur_ns").sum()).collect()
    assert {r: (n, t) for r, n, t in per_rank.iter_rows()} == expected
    # overlap.parquet is not a partition of GPU time (communication only).
    tables = [*(n for n in SUMMARY_SCHEMAS if n != "overlap"), "rank_steps", "rank_comm"]
    for name in tables:
        frame = pl.read_parquet(out / f"{name}.parquet")
        sums = frame.group_by("rank").agg(pl.col("time_ns").sum()).sort("rank")
        assert dict(sums.iter_rows()) == {r: t for r, (_, t) in expected.items()}, name
    comm = pl.read_parquet(out / "rank_comm.parquet")
    assert (comm["compute_ns"] + comm["comm_ns"] == comm["time_ns"]).all()
    # One definition of hidden communication: rank_comm and each rank's overlap.parquet agree.
    assert (comm["overlapped_ns"] + comm["exposed_ns"] == comm["comm_ns"]).all()
    assert (comm["comm_busy_ns"] <= comm["comm_ns"]).all()
    overlap = (
        pl.read_parquet(out / "overlap.parquet")
        .group_by("rank")
        .agg(pl.col("comm_ns", "overlapped_ns", "exposed_ns").sum())
    )
    keys = ["rank", "comm_ns", "overlapped_ns", "exposed_ns"]
    assert overlap.select(keys).sort("rank").rows() == comm.select(keys).sort("rank").rows()


@pytest.mark.parametrize("rank", [0, SLOW_RANK])
def test_each_ranks_waits_are_those_of_its_report_alone(
    result: dict[str, Any], rank_dir: Path, rank: int
) -> None:
    """idle, stream_idle and launch_cost: one rank's rows are what its report gives alone."""
    alone = analyse(load_profile(rank_file(rank_dir, rank)), infer=False).summaries.waits
    for name in WAITS_SCHEMAS:
        assert result["manifest"]["tables"][name]["file"] == f"{name}.parquet"
        written = pl.read_parquet(result["out"] / f"{name}.parquet")
        assert written.columns[0] == "rank"
        assert sorted(written["rank"].unique().to_list()) == GOOD_RANKS
        mine = written.filter(pl.col("rank") == rank).drop("rank")
        assert not mine.is_empty(), name
        assert mine.equals(alone[name]), name


def test_hive_dataset_reads_as_one_table(result: dict[str, Any]) -> None:
    out = result["out"] / "ops"
    rows = result["manifest"]["tables"]["ops"]["rows"]
    by_polars = pl.scan_parquet(out, hive_partitioning=True).select("rank", "dur_ns").collect()
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table(["rank", "dur_ns"])
    query = f"SELECT rank, dur_ns FROM read_parquet('{out}/*/*.parquet', hive_partitioning = true)"
    by_duckdb = duckdb.sql(query).pl()
    frames = [by_polars, pl.from_arrow(table), by_duckdb]
    for frame in frames:
        assert frame.height == rows
        assert sorted(frame["rank"].unique().to_list()) == GOOD_RANKS
    totals = [f.group_by("rank").agg(pl.col("dur_ns").sum()).sort("rank")["dur_ns"] for f in frames]
    assert totals[0].to_list() == totals[1].to_list() == totals[2].to_list()


def test_report_on_the_output_writes_the_rank_section(result: dict[str, Any]) -> None:
    code, stdout, _ = invoke(["report", str(result["out"])])
    assert code == 0
    assert "## Ranks" in stdout and f"Slowest layer: `{SLOW_LAYER}`" in stdout
    assert "rank06.sqlite" in stdout  # the failed report is listed
    assert (result["out"] / "report.md").read_text().strip() == stdout.strip()
