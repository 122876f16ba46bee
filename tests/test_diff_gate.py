"""`nsysmap diff --fail-above PCT`, used as a CI job uses it: profile, attribute, compare.

The base run is the training sample; `slow` has the c_fc gemm of block 1 take
6 ms instead of 4 (transformer.h.1.mlp.c_fc: 12 -> 18 ms per step, +50 %; the
step: +6 ms, +3.9 %); `noisy` is the base run with every operation's time
jittered by up to ±2 % (seeded), as two profiles of one commit differ.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from nsysmap.core.errors import ExitCode
from nsysmap.flow.verbs import analyse_file
from sample_reports.build import build
from tests.cli_runner import nsysmap_cli
from tests.samples import attributed_sample

C_FC = "transformer.h.1.mlp.c_fc"


def _jittered(run: Path, out: Path, spread: float) -> Path:
    """A copy of the output folder `run` with each operation's time scaled by 1 ± `spread`."""
    shutil.copytree(run, out)
    ops = pl.read_parquet(out / "ops.parquet")
    scale = 1 + np.random.default_rng(7).uniform(-spread, spread, ops.height)
    dur = (ops["dur_ns"] * scale).round().cast(pl.Int64)
    ops.with_columns(dur_ns=dur, end_ns=pl.col("start_ns") + dur).write_parquet(out / "ops.parquet")
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gate")
    build(True, slower={1: 2}).write(root / "slow.sqlite")
    analyse_file(root / "slow.sqlite", root / "slow")
    base = attributed_sample("train", root / "train")
    return {"base": base, "slow": root / "slow", "noisy": _jittered(base, root / "noisy", 0.02)}


def gate(runs, new: str, *options: str) -> int:
    return nsysmap_cli(["diff", runs["base"], runs[new], "--quiet", *options])


@pytest.mark.slow
def test_a_planted_slowdown_in_one_module_trips_the_gate(runs, capsys):
    assert gate(runs, "slow", "--fail-above", "10", "--by", "module") == ExitCode.REGRESSION
    out, err = capsys.readouterr()
    grown = [line for line in out.splitlines() if line.startswith("  ")]
    assert grown == [f"  module {C_FC} (Conv1D): 12.000 -> 18.000 ms (+50.0 %)"]
    assert err.startswith("nsysmap: error: 1 of the rows checked grew more than 10 %")


@pytest.mark.slow
def test_noise_below_the_threshold_passes(runs, capsys):
    assert gate(runs, "noisy", "--fail-above", "5", "--by", "module", "--by", "kernel") == 0
    assert gate(runs, "noisy", "--fail-above", "5", "--by", "phase") == 0
    assert capsys.readouterr().out == ""


def test_the_noise_is_there_and_a_tighter_gate_sees_it(runs):
    assert gate(runs, "noisy", "--fail-above", "0.5", "--by", "kernel") == ExitCode.REGRESSION


def test_the_step_time_is_gated_without_by(runs, capsys):
    assert gate(runs, "slow", "--fail-above", "5") == 0  # +3.9 % per step
    assert gate(runs, "slow", "--fail-above", "3") == ExitCode.REGRESSION
    assert "  time per step: " in capsys.readouterr().out


def test_a_faster_run_passes_any_gate(runs):
    assert nsysmap_cli(["diff", runs["slow"], runs["base"], "--quiet", "--fail-above", "0",
                        "--by", "module"]) == 0  # fmt: skip
