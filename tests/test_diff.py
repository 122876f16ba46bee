"""`nsysmap diff` on sample runs with known differences.

`slow` is the training sample with the c_fc gemm of block 1 taking 6 ms
instead of 4: per step its forward call is 2 ms slower and its two backward
gemms 4 ms, so transformer.h.1.mlp.c_fc is 6 ms per step slower (all of the
change), phase forward +2 ms, backward +4 ms, category gemm and the sgemm
kernel +6 ms. Against the inference sample, loss, backward and optimizer
exist only in the training run.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from nsysmap.cli import cli
from nsysmap.diff.compare import DIFF, compare, compare_runs
from nsysmap.diff.diff_charts import diff_charts
from nsysmap.diff.diff_text import render, summary, unmatched
from nsysmap.flow.verbs import analyse_file
from nsysmap.report.report_files import read_run
from sample_reports.build import build
from tests.cli_runner import nsysmap_cli
from tests.samples import analyse_samples

MS = 1_000_000
C_FC = "transformer.h.1.mlp.c_fc"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("diff")
    build(True, slower={1: 2}).write(root / "slow.sqlite")
    analyse_file(root / "slow.sqlite", root / "slow")
    return {"slow": root / "slow", **analyse_samples(root)}


@pytest.fixture(scope="module")
def slower(runs):
    return compare_runs("A", read_run(runs["train"]), "B", read_run(runs["slow"]))


@pytest.mark.slow
def test_the_labels_alone_give_the_same_where_every_step_is_measured(runs, slower):
    """`compare` of operations not placed in a structure reads the steps their labels name:
    on runs whose steps are all measured, the same rows as per the structure's steps."""
    by_labels = compare("A", read_run(runs["train"]).ops, "B", read_run(runs["slow"]).ops)
    assert by_labels.a.steps == slower.a.steps == 2
    assert (by_labels.a.scope, slower.a.scope) == ("2 steps", "2 measured steps")
    for level, rows in slower.levels.items():
        assert rows.equals(by_labels.levels[level]), level


def row(diff, level, key):
    return diff.levels[level].filter(pl.col("key") == key).row(0, named=True)


@pytest.mark.slow
def test_a_slower_layer_is_found_layer_by_layer(slower):
    assert slower.a.steps == slower.b.steps == 2
    assert slower.change_ns == 6 * MS
    c_fc = row(slower, "module", C_FC)
    assert (c_fc["a_ns_per_step"], c_fc["b_ns_per_step"]) == (12 * MS, 18 * MS)
    assert c_fc["change_ratio"] == 0.5 and c_fc["change_share"] == 1.0
    modules = slower.levels["module"]
    assert modules.row(0, named=True)["key"] == C_FC
    assert modules.filter(pl.col("key") != C_FC)["change_ns_per_step"].abs().max() == 0
    assert row(slower, "phase", "forward")["change_ns_per_step"] == 2 * MS
    assert row(slower, "phase", "backward")["change_ns_per_step"] == 4 * MS
    assert row(slower, "category", "gemm")["change_ns_per_step"] == 6 * MS
    assert row(slower, "kernel", "ampere_sgemm_128x64_tn")["change_share"] == 1.0


@pytest.mark.slow
def test_every_level_adds_up_to_each_runs_time_per_step(slower):
    for rows in slower.levels.values():
        assert rows.schema == DIFF
        assert rows["a_ns_per_step"].sum() == 152 * MS
        assert rows["b_ns_per_step"].sum() == 158 * MS
        assert rows["change_share"].sum() == pytest.approx(1.0)


@pytest.mark.slow
def test_summary_names_what_changed_most(slower):
    line = summary(slower)
    assert line.startswith("B is 6.000 ms per step slower than A (+3.9 %)")
    assert f"module {C_FC} (Conv1D) +6.000 ms, 100 % of it" in line
    assert "phase backward +4.000 ms, 67 % of it" in line


def test_unmatched_rows_are_listed(runs):
    diff = compare_runs("train", read_run(runs["train"]), "infer", read_run(runs["infer"]))
    assert unmatched(diff, "phase") == (["backward", "optimizer", "loss"], [])
    only = diff.levels["kernel"].filter(pl.col("match") == "only_a")
    assert sorted(only["label"]) == [
        "cunn_SoftMaxBackward",
        "cunn_SoftMaxForward",
        "multi_tensor_apply_kernel",
    ]
    assert (only["b_ns_per_step"] == 0).all()
    text = render(diff)
    assert "only in A (3): backward, optimizer, loss" in text
    assert row(diff, "phase", "forward")["change_ns_per_step"] == 0


def test_kernels_sharing_a_short_name_get_distinct_names(runs):
    diff = compare_runs("train", read_run(runs["train"]), "infer", read_run(runs["infer"]))
    kernels = next(c for c in diff_charts(diff) if c.id == "diff_kernel_change")
    labels = kernels.figure["data"][0]["y"]
    assert len(labels) == len(set(labels))
    assert sum("vectorized_el" in x for x in labels) == 2


def test_diff_charts_show_each_block(slower):
    charts = {c.id: c for c in diff_charts(slower)}
    assert list(charts) == [
        "diff_phase",
        "diff_blocks",
        "diff_module_change",
        "diff_category",
        "diff_kernel_change",
    ]
    a, b = charts["diff_blocks"].figure["data"]
    assert a["x"] == ["transformer.h.0", "transformer.h.1"]
    assert (a["y"], b["y"]) == ([62.0, 62.0], [62.0, 68.0])
    assert charts["diff_phase"].figure["data"][0]["x"][:2] == ["data", "forward"]


def test_diff_command_writes_text_parquet_and_html(runs, tmp_path):
    args = ["diff", str(runs["train"]), str(runs["slow"]), "-o", str(tmp_path)]
    result = CliRunner().invoke(cli, [*args, "--html", str(tmp_path / "diff.html")])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "B is 6.000 ms per step slower than A" in out
    table = pl.read_parquet(tmp_path / "diff.parquet")
    assert set(table["level"]) == {"phase", "module", "category", "kernel"}
    page = (tmp_path / "diff.html").read_text()
    assert page.count('<div class="chart"') == 5


def test_diff_of_a_missing_directory(runs, tmp_path):
    assert nsysmap_cli(["diff", str(runs["train"]), str(tmp_path / "none")]) == 3
