"""answers.json: each answer scoped as the profile is, `unknown` where it cannot tell.

Synthetic profiles plant one situation each (tests/frames.py: whole milliseconds);
the real course-assignment exports show the same on data nobody here wrote.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import polars as pl
import pytest

from nsysmap.flow.verbs import analyse, analyse_file
from nsysmap.report.answers import limitations
from nsysmap.report.build import build_report
from nsysmap.report.format import flop, ms, ratio
from nsysmap.report.report_files import ANSWERS_JSON, read_run, write_report
from tests.corpus import corpus_path
from tests.frames import MS, Frames
from tests.runs import run_data


def _report(f: Frames):
    analysis = analyse(f.profile())
    run = run_data(analysis)
    return build_report(run)


def _answers(f: Frames) -> dict:
    return _report(f).answers["answers"]


def _training_step(f: Frames, first: str = "ampere_sgemm_128x64_tn") -> None:
    """Forward (top: `first`, 3 ms), backward (top: a 5 ms gemm of another name)."""
    f.range(1, "forward", 0, 10)
    f.kernel(1, 1, first, dur=3)
    f.kernel(1, 2, "elementwise_kernel", dur=1)
    f.range(1, "backward", 10, 30)
    f.kernel(1, 11, "ampere_sgemm_64x32_sliced1x4_nt", dur=5)
    f.kernel(1, 12, first, dur=1)


@pytest.mark.slow
def test_same_top_kernel_names_both_kernels_and_says_no_when_they_differ():
    f = Frames()
    _training_step(f)
    result = _report(f)
    top = result.answers["answers"]["top_kernel"]
    assert top["scopes"]["forward"]["name"] == "ampere_sgemm_128x64_tn"
    assert top["scopes"]["forward_backward"]["name"] == "ampere_sgemm_64x32_sliced1x4_nt"
    assert top["same_with_backward"] is False
    assert (
        "Same top kernel with backward included: no (forward: `ampere_sgemm_128x64_tn`; "
        "forward + loss + backward: `ampere_sgemm_64x32_sliced1x4_nt`)."
    ) in result.markdown


@pytest.mark.slow
def test_a_forward_only_profile_has_no_answer_to_same_with_backward():
    f = Frames()
    f.range(1, "forward", 0, 10)
    f.kernel(1, 1, "ampere_sgemm_128x64_tn", dur=3)
    result = _report(f)
    top = result.answers["answers"]["top_kernel"]
    assert top["same_with_backward"] is None
    assert "forward-only" in top["same_with_backward_unknown"]
    assert "forward_backward" not in top["scopes"]
    assert "Same top kernel with backward included: unknown (" in result.markdown
    assert "included: yes" not in result.markdown


@pytest.mark.slow
def test_forward_ranges_without_steps_count_the_forward_passes():
    """Three `forward pass` ranges, no step ranges: three passes, 2 sgemm calls each."""
    f = Frames()
    for n in range(3):
        f.range(1, "forward pass", 100 * n, 100 * n + 50)
        f.kernel(1, 100 * n + 1, "ampere_sgemm_128x64_tn", dur=3)
        f.kernel(1, 100 * n + 10, "ampere_sgemm_128x64_tn", dur=3)
    result = _report(f)
    top = result.answers["answers"]["top_kernel"]
    assert (top["forward_passes"], top["forward_passes_source"]) == (3, "the range")
    assert top["scopes"]["forward"]["calls_per_forward_pass"] == 2.0
    assert "- Forward passes: 3 measured; from the range" in result.markdown


@pytest.mark.slow
def test_work_outside_every_phase_is_left_out_and_said():
    """Weights copied to the GPU before the first forward (48 % of the time) are not the
    top kernel of the steady state: the step scope is the phases, the copy is left out."""
    f = Frames()
    f.range(1, "init_model", 0, 20)
    f.kernel(1, 1, "Memcpy HtoD (Pageable -> Device)", dur=12, kind="memcpy")
    f.range(1, "forward", 20, 40)
    f.kernel(1, 21, "ampere_sgemm_128x64_tn", dur=10)
    f.kernel(1, 22, "elementwise_kernel", dur=3)
    doc = _report(f).answers
    assert doc["scopes"]["step"]["label"] == "measured region (1 forward pass)"
    assert doc["scopes"]["step"]["time_ns"] == 13 * MS
    assert doc["answers"]["top_kernel"]["scopes"]["step"]["name"] == "ampere_sgemm_128x64_tn"
    assert doc["left_out"] == [
        {
            "what": "set-up: 1 operation before the first pass, in `init_model`",
            "region": "setup",
            "ops": 1,
            "time_ns": 12 * MS,
            "share": 12 / 25,
            "why": doc["left_out"][0]["why"],
        }
    ]
    assert doc["left_out"][0]["why"].startswith("before the first pass: 1 host-to-device copy")
    assert doc["answers"]["matmul_share"]["scopes"]["step"]["share"] == 10 / 13


@pytest.mark.slow
def test_graph_replays_traced_whole_make_the_matmul_share_unknown():
    """`--cuda-graph-trace=graph`: the replay's kernels are unknown, so is the share."""
    f = Frames()
    f.range(1, "forward", 0, 50)
    f.kernel(1, 1, "ampere_sgemm_128x64_tn", dur=2)
    f.kernel(1, 5, "CUDA graph 1", dur=8, kind="graph")
    result = _report(f)
    answers = result.answers["answers"]
    share = answers["matmul_share"]["scopes"]["forward"]
    assert share["share"] is None and "--cuda-graph-trace=node" in share["unknown"]
    assert (share["share_at_least"], share["share_at_most"]) == (0.2, 1.0)
    top = answers["top_kernel"]["scopes"]["forward"]
    assert top["name"] == "ampere_sgemm_128x64_tn" and top["unknown"] is not None
    listed = answers["non_matmul_kernels"]["scopes"]["forward"]["kernels"]
    assert all(k["kind"] != "graph" for k in listed)
    assert not re.search(r"(?<![\d.])0\.0 %", result.markdown.split("## Top kernel")[0])
    assert "unknown (20.0 % to 100.0 %)" in result.markdown
    # the top kernel table's row says what its text says: unknown, the largest seen named
    rows = [line for line in result.markdown.splitlines() if line.startswith("| this run |")]
    top_rows = [line for line in rows if "ampere_sgemm_128x64_tn" in line]
    assert top_rows and all("unknown (largest seen: `ampere_sgemm" in r for r in top_rows)


@pytest.mark.slow
def test_softmax_and_matmul_ranges_count_without_an_attention_parent():
    f = Frames()
    f.range(1, "forward pass", 0, 100)
    f.range(1, "computing attention scores", 10, 20)
    f.kernel(1, 11, "ampere_sgemm_128x64_tn", dur=3)
    f.range(1, "computing softmax", 20, 30)
    f.kernel(1, 21, "exp_kernel", dur=2)
    f.range(1, "computing final matmul", 30, 40)
    f.kernel(1, 31, "ampere_sgemm_128x64_tn", dur=4)
    answer = _answers(f)["softmax_vs_matmul"]
    assert answer["attention_source"] == "ranges"
    time = answer["attention"]["time"]
    assert (time["softmax_ns"], time["matmul_ns"], time["ratio"]) == (2 * MS, 7 * MS, 2 / 7)


@pytest.mark.corpus
def test_tflops_divide_by_the_time_whose_flops_are_counted():
    """A graph-replayed decode step: most kernels have no launching operator, so no shapes;
    the rate divides the FLOPs by the time of the operations that could carry them."""
    path = corpus_path("tracelens_vllm_gptoss_fullgraph_decode_hipgraph_mi300x.json.gz")
    analysis = analyse(_load(path))
    run = run_data(analysis, "recsys")
    rate = build_report(run).answers["answers"]["flop_rate"]
    ops = analysis.ops
    counted = int(ops.filter(pl.col("aten_op").is_not_null())["dur_ns"].sum())
    assert rate["flop_time_ns"] == counted < rate["time_ns"] == int(ops["dur_ns"].sum())
    assert rate["tflops_per_s"] == pytest.approx(rate["matmul_flop"] / counted / 1e3)


def _load(path):
    from nsysmap import load_profile

    return load_profile(path)


@pytest.mark.corpus
def test_course_export_softmax_flops_come_from_its_softmax_ranges(tmp_path):
    """cs336 forward+backward: a hand-written softmax (max, sub, exp, sum, div) inside
    `computing softmax`; its FLOPs are those operators' estimates, not 0."""
    analyse_file(corpus_path("cs336a2_small_fwdbwd_emitnvtx_shapes_a100.sqlite"), tmp_path)
    result = build_report(read_run(tmp_path))
    flops = result.answers["answers"]["softmax_vs_matmul"]["attention"]["flops"]
    assert flops["softmax_flop"] > 0 and flops["matmul_flop"] > 0
    assert flops["ratio"] == flops["softmax_flop"] / flops["matmul_flop"]
    assert "| FLOPs, attention ranges | 0 FLOP |" not in result.markdown
    brief = result.markdown.split("## Answers in brief")[1].split("##")[0]
    assert f"softmax does {ratio(flops['ratio'])} times the attention matmuls' FLOPs" in brief
    # the time compares whole ranges, and says so beside the matmul kernels alone
    time = result.answers["answers"]["softmax_vs_matmul"]["attention"]["time"]
    assert f"the softmax ranges take {ms(time['softmax_ns'])} against " in brief
    assert f"their matmul kernels alone {ms(time['matmul_kernel_ns'])}, " in brief
    # By kernel category, softmax FLOPs are those of the `softmax` kernels, as in the
    # categories table (the hand-written softmax's exp kernels), not 0.
    answers = result.answers["answers"]
    every = answers["softmax_vs_matmul"]["by_kernel_category"]["flops"]
    softmax_row = next(r for r in answers["categories"]["rows"] if r["category"] == "softmax")
    assert every["softmax_flop"] == softmax_row["other_flop_estimate"] > 0


@pytest.mark.corpus
def test_course_forward_export_counts_its_one_forward_pass(tmp_path):
    analyse_file(corpus_path("cs336a2_small_fwd_emitnvtx_shapes_a100.sqlite"), tmp_path)
    result = build_report(read_run(tmp_path))
    write_report(result, tmp_path)
    answers = json.loads((tmp_path / ANSWERS_JSON).read_text())
    top = answers["answers"]["top_kernel"]
    assert (top["forward_passes"], top["forward_passes_source"]) == (1, "the range")
    forward = top["scopes"]["forward"]
    assert forward["calls_per_forward_pass"] == forward["forward_calls"] == forward["calls"]
    assert answers["schema"] == "nsysmap.answers" and answers["schema_version"] == "2.4"


@pytest.mark.slow
def test_the_header_says_which_steps_nsysmap_run_left_uncaptured():
    """A 4-step run whose first step was warm-up: 3 profiled, and the header says so."""
    f = Frames()
    for step in (1, 2, 3):
        f.range(1, f"nsysmap:step:{step}", 100 * step, 100 * step + 50)
        f.range(1, "nsysmap:phase:forward", 100 * step, 100 * step + 50)
        f.kernel(1, 100 * step + 1, "ampere_sgemm_128x64_tn", dur=3)
    analysis = analyse(f.profile())
    manifest = {**analysis.manifest, "options": {"steps_seen": 4, "profiled_steps": [1, 3]}}
    run = run_data(analysis, manifest=manifest)
    result = build_report(run)
    assert result.answers["run"]["steps"] == 3
    assert (
        "- Steps: 3 measured (counted per device), from the range; the script ran 4 steps and "
        "`nsysmap run` profiled 3 of them (steps 1 to 3)"
    ) in result.markdown


@pytest.mark.slow
def test_non_matmul_kernels_are_told_apart_and_grouped_by_operator(tmp_path):
    """Templated elementwise kernels that share their first 90 characters get different
    labels; the forward scope's time is also given per PyTorch operator."""
    head = "void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_"
    f = Frames()
    f.range(1, "forward", 0, 100)
    for n, functor in enumerate(("MulFunctor", "DivFunctor", "AddFunctor")):
        f.range(1, f"aten::{functor[:3].lower()}, seq = {n}", 10 * n, 10 * n + 9)
        f.kernel(1, 10 * n + 1, f"{head}impl_nocast<at::native::{functor}<float>>(int)", dur=2)
    forward = _answers(f)["non_matmul_kernels"]["scopes"]["forward"]
    labels = [k["label"] for k in forward["kernels"]]
    assert len(set(labels)) == 3 and all(len(label) <= 90 for label in labels)
    assert {o["aten_op"] for o in forward["operators"]} == {"aten::mul", "aten::div", "aten::add"}


def test_a_capture_without_ranges_says_its_host_copies_are_in_the_answers():
    f = Frames()
    f.kernel(1, 1, "[CUDA memcpy HtoD]", dur=6, kind="memcpy")
    f.kernel(1, 10, "ampere_sgemm_128x64_tn", dur=4)
    doc = _report(f).answers
    assert doc["scopes"]["step"]["label"] == "whole capture"
    notes = [n for n in doc["cannot_answer"] if n.startswith("No ranges mark the steady state")]
    assert len(notes) == 1 and "60.0 % of the time is host-to-device copies" in notes[0]


@pytest.mark.slow
def test_the_brief_names_work_left_out_unless_it_is_a_sliver():
    """Set-up work of 0.05 % of the time stays in the table but not in the brief; 48 % does."""
    for setup_ms, in_brief in ((1, False), (1900, True)):
        f = Frames()
        f.range(1, "init_model", 0, 3000)
        f.kernel(1, 1, "Memcpy HtoD (Pageable -> Device)", dur=setup_ms, kind="memcpy")
        f.range(1, "forward", 3000, 5100)
        f.kernel(1, 3001, "ampere_sgemm_128x64_tn", dur=2000)
        result = _report(f)
        assert len(result.answers["left_out"]) == 1
        brief = result.markdown.split("## Answers in brief")[1].split("##")[0]
        assert ("Left out of the answers: set-up: 1 operation" in brief) is in_brief


@pytest.mark.corpus
def test_a_layer_faster_than_its_device_is_called_out(tmp_path):
    """The Switch-Transformer trace's kernels once carried unrelated operators' shapes
    (its External ids are correlation ids: nsysmap.read.torch.torch_links), a layer at 12x
    the A100's peak. Linked through their launch calls every layer fits, and the report
    says nothing; the same layers made to run above peak are called out."""
    analyse_file(corpus_path("switchtransformer_moe_fwd_with_modules_a100.json"), tmp_path / "a")
    result = build_report(read_run(tmp_path / "a"))
    assert (result.findings.layers["mfu"].drop_nulls() <= 1).all()
    assert not any(n.startswith("FLOPs do not fit") for n in result.answers["cannot_answer"])
    too_fast = result.findings.layers.with_columns(pl.col("mfu") * 20)
    over = too_fast.filter(pl.col("mfu") > 1).height
    notes = limitations(replace(result.findings, layers=too_fast))
    notes = [n for n in notes if n.startswith("FLOPs do not fit")]
    assert over >= 1 and len(notes) == 1
    assert f"in {over} layer(s)" in notes[0]


@pytest.mark.parametrize(
    ("count", "text"),
    [(0, "0 FLOP"), (432.0, "432 FLOP"), (999.6, "1,000 FLOP"), (2592, "2.592 kFLOP"),
     (7.247e6, "7.247 MFLOP"), (None, "–")],
)  # fmt: skip
def test_flop_counts_under_a_kflop_are_whole_flops(count, text):
    assert flop(count) == text
