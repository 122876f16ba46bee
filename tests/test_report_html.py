"""The HTML report: the data behind each chart (by hand and golden), and the page itself.

Numbers on the training sample per step (tests/test_report.py has the whole
timeline): data 1 ms, forward 53, loss 2, backward 92, optimizer 4.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import plotly.graph_objects as go
import polars as pl
import pytest
from click.testing import CliRunner

from devtools.synth.bulk import write_export
from devtools.synth.tile import gpt_tables
from nsysmap.cli import cli
from nsysmap.findings import with_findings
from nsysmap.flow.verbs import analyse_file
from nsysmap.report.answers import ReportOptions
from nsysmap.report.build import build_report
from nsysmap.report.html.chart import MAX_BARS, PHASE_COLOURS, TOP_ROWS
from nsysmap.report.html.charts import missing_charts, report_charts
from nsysmap.report.html.layers import top_layers
from nsysmap.report.html.names import distinct_labels, middle
from nsysmap.report.html.page import page, plotly_js, report_page
from nsysmap.report.html.steps import phase_steps_chart
from nsysmap.report.html.tree import (
    ROOT,
    depth,
    module_paths,
    range_paths,
    tree,
    without_lone_root,
)
from nsysmap.report.kernel_labels import kernel_label, kernel_labels
from nsysmap.report.report_files import read_run
from sample_reports.golden import CHARTS, chart_document, chart_text
from tests.corpus import corpus_path
from tests.samples import SAMPLES, analyse_samples

TRAIN_CHARTS = [
    "phase_steps",
    "phase_spread",
    "blocks_phase",
    "blocks_parts",
    "tree",
    "matmul",
    "categories",
    "top_kernels",
    "communication",
    "waits",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("html")
    analyse_samples(root)
    gpt = write_export(root / "gpt12.sqlite", gpt_tables(1500, seed=2))
    analyse_file(gpt, root / "gpt12", before_write=with_findings)
    return {"train": root / "train", "infer": root / "infer", "gpt12": root / "gpt12"}


@pytest.fixture(scope="module")
def train(runs):
    return build_report(read_run(runs["train"]), read_run(runs["infer"]))


@pytest.fixture(scope="module")
def charts(train):
    return {c.id: c for c in report_charts(train.findings, train.compare)}


def trace(chart, name):
    return next(t for t in chart.figure["data"] if t.get("name") == name)


@pytest.mark.slow
def test_the_training_sample_draws_its_charts(charts, train):
    assert list(charts) == TRAIN_CHARTS
    assert missing_charts(train.findings) == []
    assert any(n.startswith("No FLOPs, so no TFLOP/s or MFU") for n in train.findings.notes)


@pytest.mark.slow
def test_time_by_phase_per_step(charts):
    steps = charts["phase_steps"]
    got = {t["name"]: t["y"] for t in steps.figure["data"]}
    assert list(got) == ["data", "forward", "loss", "backward", "optimizer"]
    assert got == {
        "data": [1.0, 1.0],
        "forward": [53.0, 53.0],
        "loss": [2.0, 2.0],
        "backward": [92.0, 92.0],
        "optimizer": [4.0, 4.0],
    }
    assert steps.table.rows[0][-1] == 152.0  # the step total
    spread = {r[0]: r[1:] for r in charts["phase_spread"].table.rows}
    assert spread["step total"] == [2, 152.0, 152.0, 152.0, 0.0, 0.0]


@pytest.mark.slow
def test_each_block_by_phase_and_by_part(charts):
    blocks = charts["blocks_phase"]
    assert trace(blocks, "forward")["x"] == ["transformer.h.0", "transformer.h.1"]
    assert trace(blocks, "forward")["y"] == [23.0, 23.0]
    assert trace(blocks, "backward")["y"] == [39.0, 39.0]
    assert trace(blocks, "no direction")["y"] == [0.0, 0.0]
    parts = {t["name"]: t["y"] for t in charts["blocks_parts"].figure["data"]}
    assert parts == {
        "attn": [28.0, 28.0],
        "mlp": [26.0, 26.0],
        "(own)": [4.0, 4.0],
        "ln_1": [2.0, 2.0],
        "ln_2": [2.0, 2.0],
    }


@pytest.mark.slow
def test_the_module_tree_holds_all_time(charts):
    icicle = charts["tree"].figure["data"][0]
    values = dict(zip(icicle["ids"], icicle["values"], strict=True))
    parents = dict(zip(icicle["ids"], icicle["parents"], strict=True))
    assert sum(values.values()) == pytest.approx(154.0)  # 308 ms over 2 steps, outside steps too
    assert icicle["branchvalues"] == "remainder"
    c_fc = next(i for i in icicle["ids"] if i.endswith("h\x1f1\x1fmlp\x1fc_fc"))
    assert values[c_fc] == 12.0  # forward 4 + backward 8 per step
    assert all(p in values for p in parents.values() if p)


@pytest.mark.slow
def test_the_tree_s_branch_colours_are_no_phase_s(charts):
    """The phase charts colour forward blue and backward orange; the icicle beside them
    must not colour a branch (say, the backward range) in another phase's colour."""
    colorway = charts["tree"].figure["layout"]["iciclecolorway"]
    assert colorway and not set(map(str.lower, colorway)) & {
        c.lower() for c in PHASE_COLOURS.values()
    }


@pytest.mark.slow
def test_matmul_share_forward_against_full_step(charts):
    bars = trace(charts["matmul"], "matrix multiplication")
    shares = dict(zip(bars["x"], bars["y"], strict=True))
    assert shares["forward passes of 2 steps"] == round(74 / 106, 6)
    assert shares["2 measured steps"] == round(222 / 304, 6)
    assert shares["2 measured steps (forward-only run)"] == round(74 / 108, 6)


@pytest.mark.slow
def test_top_kernels_with_calls_per_step_and_per_forward_pass(charts):
    top = charts["top_kernels"]
    first = top.table.rows[0]
    # rank, kernel, category, calls, calls per step, calls per forward pass, time, share
    assert first[:6] == [1, "ampere_sgemm_128x64_tn", "gemm", 78, 39.0, 13.0]
    labels = top.figure["data"][0]["y"]
    assert len(set(labels)) == len(labels)


def test_kernel_names_cut_in_the_middle_never_look_alike():
    a = "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float>>(int)"
    b = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float>>(int)"
    assert middle(a, 30) == middle(b, 30)  # a plain cut would merge them
    la, lb, lc = distinct_labels([a, b, "gemm"], 30)
    assert la != lb and lc == "gemm" and "…" in la and len(la) < len(a)
    assert distinct_labels([a, a], 30)[0] == distinct_labels([a, a], 30)[1]


def test_range_tree_is_cut_to_the_largest_nodes_without_losing_time():
    ops = pl.DataFrame(
        {
            "range_path": ["s > f > a", "s > f > b", "s > g", None, "s > f > c"],
            "dur_ns": [5, 3, 2, 7, 1],
        }
    )
    full = tree(range_paths(ops), " > ")
    assert full.filter(pl.col("id") == ROOT)["inclusive_ns"].item() == 18
    small = tree(range_paths(ops), " > ", limit=4)  # all, s, (outside ranges), f
    assert small["label"].to_list() == [ROOT, "s", "(outside ranges)", "f"]
    assert small["own_ns"].sum() == 18
    own = dict(zip(small["label"], small["own_ns"], strict=True))
    assert own == {ROOT: 0, "s": 2, "(outside ranges)": 7, "f": 9}


def test_module_tree_names_the_root_module_and_its_missing_ancestors():
    ops = pl.DataFrame({"module": ["", "a.b.c", None], "dur_ns": [1, 2, 4]})
    nodes = tree(module_paths(ops, "Net"), ".", 1)
    paths = dict(zip(nodes["label"], nodes["path"], strict=True))
    assert paths == {
        ROOT: "",
        "Net": "Net",
        "a": "a",
        "b": "a.b",
        "c": "a.b.c",
        "(outside modules)": "(outside modules)",
    }
    assert nodes.filter(pl.col("label") == "a")["inclusive_ns"].item() == 2


@pytest.mark.slow
def test_twelve_blocks_and_rates_when_flops_are_known(runs):
    result = build_report(read_run(runs["gpt12"]), options=ReportOptions(dtype="bf16"))
    charts = {c.id: c for c in report_charts(result.findings)}
    assert "rates" in charts
    blocks = trace(charts["blocks_phase"], "forward")["x"]
    assert blocks == [f"transformer.h.{i}" for i in range(12)]
    mfu = trace(charts["rates"], "MFU")["y"]
    assert all(0 < m < 1 for m in mfu)


@pytest.mark.slow
def test_every_figure_is_valid_plotly(charts):
    for chart in charts.values():
        go.Figure(chart.figure)  # raises on a property Plotly does not know


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2_tiny_train", "gpt2_tiny_infer"])
def test_chart_data_matches_golden_files(name):
    golden = (SAMPLES / "expected" / name / CHARTS).read_text()
    assert chart_text(chart_document(SAMPLES / f"{name}.sqlite")) == golden


@pytest.mark.slow
def test_page_is_self_contained(train):
    page = report_page(train.findings, train.compare)
    assert page.count(plotly_js()) == 1
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)
    specs = re.findall(r'<script type="application/json" id="fig-(\w+)">(.*?)</script>', page)
    assert [s[0] for s in specs] == ["fix_first", *TRAIN_CHARTS]  # what to fix first on top
    assert json.loads(specs[1][1])["data"][0]["name"] == "data"
    assert page.count('<table class="sortable">') == len(TRAIN_CHARTS) + 1
    notes = page.index("What this data cannot answer")
    assert page.index('id="sec-fix_first"') < notes < page.index('id="sec-phase_steps"')


def test_names_in_the_brief_and_the_structure_are_code_not_backticks():
    text = page(
        "t",
        [],
        [],
        [],
        answers=["Matmul: 88.1 % of the pass inside `measurement`; top `<svg onload=x>`"],
        structure=["measured: 1 forward pass inside `measurement`"],
    )
    sections = {}
    for section in ("structure", "answers"):
        start = text.index(f'<section class="limits {section}">')
        sections[section] = text[start : text.index("</section>", start)]
        assert "`" not in sections[section] and "<code>measurement</code>" in sections[section]
    assert "<code>&lt;svg onload=x&gt;</code>" in sections["answers"]


@pytest.mark.slow
def test_report_html_option_writes_the_page(runs, tmp_path):
    result = CliRunner().invoke(cli, ["report", str(runs["infer"]), "--quiet", "--html"])
    assert result.exit_code == 0, result.output
    assert (runs["infer"] / "report.html").read_text().startswith("<!DOCTYPE html>")
    target = tmp_path / "r.html"
    result = CliRunner().invoke(
        cli, ["report", str(runs["infer"]), "--quiet", "--html", str(target)]
    )
    assert result.exit_code == 0, result.output
    assert "Time by phase in each step" in target.read_text()


ELEMENTWISE = (
    "void at::native::elementwise_kernel<(int)128, (int)2, void at::native::"
    "gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, "
    "at::native::binary_internal::{op}<float>>>(at::TensorIteratorBase &, const T1 &)"
    "::[lambda(int) (instance 1)]>(int, T3)"
)


def test_templated_kernel_names_keep_what_tells_them_apart():
    mul, div = ELEMENTWISE.format(op="MulFunctor"), ELEMENTWISE.format(op="DivFunctor")
    lm, ld, lg = kernel_labels([mul, div, "ampere_sgemm_128x64_tn"])
    assert lm != ld and "MulFunctor" in lm and "DivFunctor" in ld
    assert lm.startswith("elementwise_kernel<") and len(lm) <= 60
    assert lg == "ampere_sgemm_128x64_tn"
    assert kernel_label("void at::native::f<(int)4, long>(char *, int)") == "f<4, long>"
    alike = kernel_labels([mul, mul.replace("float *", "float*") + " "])
    assert len(set(alike)) == 2


def test_operator_ranges_group_by_name_and_taken_operations_nest():
    ops = pl.DataFrame(
        {
            "device_id": [0, 0, 0, 0],
            "range_id": [1, 2, 3, 3],
            "other_thread_range_id": [None, None, 9, 9],
            "range_path": [
                "run > fwd > aten::mm, seq = 1, op_id = 4",
                "run > fwd > aten::mm, seq = 2, op_id = 7",
                "MmBackward0, seq = 2",
                "MmBackward0, seq = 1",
            ],
            "dur_ns": [1, 2, 3, 4],
        }
    )
    by_range = pl.DataFrame(
        {
            "device_id": [0, 0, 0, 0],
            "range_path": ["run", "run > fwd", "run > bwd", "MmBackward0"],
            "inclusive_ns": [10, 3, 7, 7],
        }
    )
    flat = tree(range_paths(ops), " > ")
    assert set(flat["path"]) == {"", "run", "run > fwd", "run > fwd > aten::mm", "MmBackward0"}
    nested = tree(range_paths(ops, by_range), " > ")
    paths = dict(zip(nested["path"], nested["inclusive_ns"], strict=True))
    assert paths["run > bwd > MmBackward0"] == 7 and paths["run"] == 10
    assert "MmBackward0" not in paths


@pytest.mark.slow
def test_phases_without_steps_are_drawn_over_the_whole_run(train):
    f = train.findings
    ops = f.run.ops.with_columns(step=pl.lit(None, pl.Int64))
    chart = phase_steps_chart(replace(f, run=replace(f.run, ops=ops), steps=None))
    assert chart is not None and trace(chart, "forward")["x"] == ["whole run"]
    assert trace(chart, "forward")["y"] == [106.0]  # 53 ms in each of the 2 steps


def test_a_chart_of_many_layers_keeps_the_top_ones_and_one_other_bar():
    n = 50
    layers = pl.DataFrame(
        {
            "layer": [f"l{i}" for i in range(n)],
            "time_ns": [1000 * (i + 1) for i in range(n)],
            "matmul_flop": [1e6] * n,
            "tflops_per_s": [1e6 / (1000 * (i + 1)) / 1e3 for i in range(n)],
            "mfu": [None] * n,
        }
    )
    drawn = top_layers(layers)
    assert drawn.height == TOP_ROWS + 1
    assert drawn["layer"][-1] == f"other ({n - TOP_ROWS})"
    assert set(drawn["layer"][:-1]) == {f"l{i}" for i in range(n - TOP_ROWS, n)}
    rest = 1e6 * (n - TOP_ROWS) / sum(1000 * (i + 1) for i in range(n - TOP_ROWS)) / 1e3
    assert drawn["tflops_per_s"][-1] == pytest.approx(rest)


@pytest.mark.slow
def test_many_steps_draw_the_first_forty_and_the_table_keeps_all(train):
    f = train.findings
    ops = f.run.ops.with_columns(step=pl.col("op_id") % 50)
    chart = phase_steps_chart(replace(f, run=replace(f.run, ops=ops)))
    assert chart is not None
    assert {len(t["x"]) for t in chart.figure["data"]} == {MAX_BARS}
    assert len(chart.table.rows) == 50 and f"first {MAX_BARS} of 50" in chart.caption


def test_a_root_with_one_child_and_no_time_is_not_drawn():
    ops = pl.DataFrame({"range_path": ["s > f", "s > g", "s"], "dur_ns": [5, 3, 2]})
    nodes = without_lone_root(tree(range_paths(ops), " > "))
    assert nodes.filter(pl.col("parent") == "")["label"].to_list() == ["s"]
    assert nodes["own_ns"].sum() == 10 and ROOT not in nodes["label"].to_list()
    assert dict(zip(nodes["label"], depth(nodes), strict=True)) == {"s": 1, "f": 2, "g": 2}
    both = pl.DataFrame({"range_path": ["s", None], "dur_ns": [1, 1]})
    assert without_lone_root(tree(range_paths(both), " > "))["label"][0] == ROOT


@pytest.mark.corpus
def test_real_backward_pass_is_one_box_over_grouped_operators(tmp_path):
    analyse_file(corpus_path("cs336a2_small_fwdbwd_emitnvtx_shapes_a100.sqlite"), tmp_path)
    result = build_report(read_run(tmp_path))
    chart = next(c for c in report_charts(result.findings) if c.id == "tree")
    inclusive = {row[0]: row[2] for row in chart.table.rows}
    assert inclusive["profile > backward pass"] > 0.6 * inclusive["profile"]
    assert not any("seq = " in path for path in inclusive)  # operator calls grouped
    assert len(inclusive) < 300  # not one sliver per call
    labels = next(c for c in report_charts(result.findings) if c.id == "top_kernels")
    names = labels.figure["data"][0]["y"]
    assert len(set(names)) == len(names) and max(map(len, names)) <= 80
    assert any("MulFunctor" in n for n in names) and any("DivFunctor" in n for n in names)


@pytest.mark.corpus
def test_names_marked_for_markdown_are_code_in_the_page_and_plain_in_its_charts(tmp_path):
    """The structure's scope names (`measurement`) and the findings' names reach the page as
    <code> in its text, captions and cells, and as plain text in Plotly's labels and hover
    texts: no Markdown backtick shows anywhere outside Plotly's own script."""
    name = "cs336a2_small_fwd_unranged_warmup_then_measurement_range_rtx5070laptop.sqlite"
    analyse_file(corpus_path(name), tmp_path, before_write=with_findings)
    text = report_page(build_report(read_run(tmp_path)).findings)
    text = text.replace(plotly_js(), "")
    assert "`" not in text
    assert "Measured region inside <code>measurement</code>, devices pooled." in text
    assert "Needs: the fp32 and TF32/bf16 peaks of <code>NVIDIA GeForce RTX 5070" in text
    assert '"1 forward pass inside measurement"' in text  # a chart's label
