"""Ranks of real exports: the two-process FastVideo capture gives one rank per process.

`nsys profile torchrun --nproc_per_node=2 ...` records both ranks in one
export, without their RANK variables (torchrun sets those for its children).
With `--ranks`, each process is a rank, ordered by its GPU; per-rank totals
are checked against plain SQL per device. Runs on nsysmap's own local Dask
cluster (worker processes), so that path is covered too.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from nsysmap.flow.verbs import analyse
from nsysmap.read.nsys.nsys_sqlite import read_sqlite
from nsysmap.sources.reading import load_profile
from tests.cli_runner import invoke
from tests.corpus import corpus_path, independent_gpu_totals, needs_corpus

pytestmark = [needs_corpus, pytest.mark.corpus, pytest.mark.dask]
FASTVIDEO = "fastvideo_training_mfu_h100x2_before.sqlite"


def test_two_process_export_gives_a_rank_per_process(tmp_path) -> None:
    path = corpus_path(FASTVIDEO)
    code, stdout, stderr = invoke(
        ["attribute", str(path), "--ranks", "-o", str(tmp_path), "--workers", "1"]
    )
    assert code == 0, stderr
    ranks = pl.read_parquet(tmp_path / "ranks.parquet")
    # python3 processes 144 and 145 drive GPUs 0 and 1 (PROCESSES, kernel table).
    assert ranks.select("rank", "pid", "device_ids", "rank_source").rows() == [
        (0, 144, [0], "process"),
        (1, 145, [1], "process"),
    ]
    expected = independent_gpu_totals(path)  # device -> (ops, ns)
    # by_range too: each process is read and attributed alone, its ranges with it.
    for name in ("by_phase", "by_module", "by_range", "rank_steps", "rank_comm"):
        sums = (
            pl.read_parquet(tmp_path / f"{name}.parquet")
            .group_by("rank")
            .agg(pl.col("time_ns").sum())
        )
        assert dict(sums.iter_rows()) == {0: expected[0][1], 1: expected[1][1]}, name
    ops = pl.scan_parquet(tmp_path / "ops", hive_partitioning=True)
    per_rank = ops.group_by("rank", "device_id").agg(pl.len()).sort("rank").collect()
    assert per_rank.rows() == [(0, 0, expected[0][0]), (1, 1, expected[1][0])]
    # The waits are per GPU: each rank's rows are its own GPU's, as the whole export gives them.
    whole = analyse(load_profile(path), infer=False).summaries.waits
    for name in ("idle", "stream_idle", "launch_cost"):
        written = pl.read_parquet(tmp_path / f"{name}.parquet")
        assert written.select("rank", "device_id").unique().sort("rank").rows() == [(0, 0), (1, 1)]
        for rank in (0, 1):
            # op_id is counted per process read (nsysmap.sources.by_process): next_op_id apart
            mine = written.filter(pl.col("rank") == rank).drop("rank", "next_op_id", strict=False)
            alone = whole[name].filter(pl.col("device_id") == rank)
            assert mine.equals(alone.drop("next_op_id", strict=False)), name
    idle = pl.read_parquet(tmp_path / "idle.parquet").drop_nulls("next_op_id")
    ended = ops.select("rank", next_op_id="op_id", next_start_ns="start_ns").collect()
    ended = idle.join(ended.with_columns(pl.col("rank").cast(pl.Int64)), on=["rank", "next_op_id"])
    assert ended.height == idle.height and (ended["end_ns"] <= ended["next_start_ns"]).all()
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert {"idle", "stream_idle", "launch_cost"} <= set(manifest["tables"])
    assert manifest["cluster"]["scheduler"] == "local" and manifest["cluster"]["workers"] == 1
    assert "holds 2 processes" in manifest["rank_rule"]
    assert "Slowest rank:" in stdout


@pytest.mark.parametrize(
    ("name", "variable"),
    [
        ("nvfuser_gtest_hopper_matmul_h100.sqlite", "RANK"),
        ("pipit_cloverleaf_cuda_perlmutter.sqlite", "PMI_RANK"),
    ],
)
def test_rank_declared_in_the_launch_environment(name: str, variable: str) -> None:
    report = read_sqlite(corpus_path(name))
    assert report.meta_value("rank") == "0"
    assert report.meta_value("world_size") == "1"
    assert report.meta_value("rank_variable") == variable


def test_no_rank_without_launch_environment() -> None:
    report = read_sqlite(corpus_path(FASTVIDEO))
    assert report.meta_value("rank") is None and report.meta_value("rank_variable") is None
