"""The report's sentences on real and synthetic profiles: no repeats, no 0 for unknown,
no claim the profile cannot make."""

from __future__ import annotations

import re

import pytest

from nsysmap.flops.peaks import peak_tflops
from nsysmap.flow.verbs import analyse, analyse_file
from nsysmap.report.build import build_report
from nsysmap.report.format import ratio
from nsysmap.report.html.page import report_page
from nsysmap.report.report_files import read_run
from nsysmap.report.waits_text import waits_lead
from tests.corpus import corpus_path
from tests.frames import MS, Frames
from tests.runs import run_data


def _report(f: Frames):
    analysis = analyse(f.profile())
    run = run_data(analysis)
    return build_report(run)


def _section(markdown: str, title: str) -> str:
    return markdown.split(f"## {title}\n")[1].split("\n## ")[0]


def _forward_only() -> Frames:
    f = Frames()
    f.range(1, "forward", 0, 10)
    f.kernel(1, 1, "ampere_sgemm_128x64_tn", dur=3)
    f.kernel(1, 2, "elementwise_kernel", dur=1)
    return f


@pytest.mark.slow
def test_a_forward_only_profile_says_its_step_answers_once():
    """Without backward, the step (all phases) is the forward pass: the brief names the top
    kernel once and the non-matmul section does not print the same tables twice."""
    markdown = _report(_forward_only()).markdown
    brief = _section(markdown, "Answers in brief")
    assert brief.count("Top kernel of the") == 1
    assert "Top kernel of the 1 forward pass: `ampere_sgemm_128x64_tn`" in brief
    non_matmul = markdown.split("## Non-matmul kernels")[1].split("\n## ")[0]
    assert non_matmul.count("| kernel | category | calls | time | share |") == 1
    assert "The same as the forward pass's" in non_matmul


@pytest.mark.slow
def test_a_top_kernel_only_in_backward_is_not_said_to_run_0_times_per_forward_pass():
    f = Frames()
    f.range(1, "forward", 0, 10)
    f.kernel(1, 1, "ampere_sgemm_128x64_tn", dur=3)
    f.range(1, "backward", 10, 30)
    f.kernel(1, 11, "ampere_sgemm_64x32_sliced1x4_nt", dur=5)
    result = _report(f)
    step = result.answers["answers"]["top_kernel"]["scopes"]["step"]
    assert step["name"] == "ampere_sgemm_64x32_sliced1x4_nt" and step["forward_calls"] == 0
    brief = _section(result.markdown, "Answers in brief")
    said = "`ampere_sgemm_64x32_sliced1x4_nt` (62.5 % of its time), not launched in the forward"
    assert said in brief
    assert "0.00 calls per forward pass" not in brief


def test_without_phases_the_forward_pass_is_unmarked_not_absent():
    """Kernels but no ranges: nothing marks the forward pass; the report must not say the
    profile has no forward work, and labels work outside phases as the waits table does."""
    f = Frames()
    f.kernel(1, 1, "ampere_sgemm_128x64_tn", dur=3)
    f.kernel(1, 2, "elementwise_kernel", dur=1)
    result = _report(f)
    markdown = result.markdown
    assert "no forward work" not in markdown
    assert "no operations in this scope" not in markdown
    why = result.answers["answers"]["top_kernel"]["same_with_backward_unknown"]
    assert "marks a forward pass" in why and f"included: unknown ({why})" in markdown
    assert "- Phases: none: no phase ranges or records\n" in markdown
    assert "| (outside every phase) | 2 |" in _section(markdown, "Where the time goes: by phase")
    assert "| (none) |" not in markdown


@pytest.mark.parametrize(
    ("x", "text"),
    [(0.851, "0.851"), (0.015625, "0.0156"), (0.75, "0.750"), (0.0001071, "0.000107"), (2, "2.00")],
)
def test_ratios_keep_three_significant_digits(x, text):
    """0.0000 said a small ratio was none; 0.7500 claimed digits it did not have."""
    assert ratio(x) == text


def test_a_trace_naming_its_gpu_with_an_empty_string_does_not_name_it():
    assert peak_tflops("", "bf16") == (None, "the report does not name the GPU")


@pytest.mark.corpus
def test_softmax_inside_fused_attention_is_unknown_not_0(tmp_path):
    """BERT on H100: softmax runs inside fused attention kernels; its time and FLOPs are
    unknown (not 0 FLOP and a 0.0000 ratio), and the brief says so in one sentence."""
    analyse_file(corpus_path("tracelens_bert_small_infer_modules_h100.json.gz"), tmp_path)
    result = build_report(read_run(tmp_path))
    answer = result.answers["answers"]["softmax_vs_matmul"]
    for block in (answer["attention"], answer["by_kernel_category"]):
        for entry in block.values():
            assert entry["ratio"] is None and entry["unknown"]
    flops = answer["attention"]["flops"]
    assert flops["softmax_flop"] is None and flops["matmul_flop"] > 0
    brief = _section(result.markdown, "Answers in brief")
    assert "Softmax against the attention matmuls: unknown (softmax runs inside fused" in brief
    assert "it does" not in brief
    table = _section(result.markdown, "Softmax versus the attention matmuls")
    assert "0 FLOP" not in table and "0.0000" not in table


@pytest.mark.corpus
def test_a_forward_from_module_calls_is_said_in_the_header(tmp_path):
    """Switch-Transformer: no phase ranges, yet a forward pass from module calls; the
    header must not say the phases come from nothing while the answers use a forward pass."""
    analyse_file(corpus_path("switchtransformer_moe_fwd_with_modules_a100.json"), tmp_path)
    markdown = build_report(read_run(tmp_path)).markdown
    assert "from nothing" not in markdown
    assert "- Phases: none: no phase ranges or records; the passes come from the module calls" in (
        markdown
    )


@pytest.mark.slow
def test_the_brief_does_not_call_a_copy_a_kernel():
    """No ranges: the brief lists non-matmul work by kernel, and a host-to-device copy is
    no kernel: it has a sentence of its own (cs336 without NVTX: 58 % of the time)."""
    f = Frames()
    f.kernel(1, 1, "[CUDA memcpy HtoD]", dur=5, kind="memcpy")
    f.kernel(1, 10, "ampere_sgemm_128x64_tn", dur=3)
    f.kernel(1, 20, "elementwise_kernel", dur=1)
    result = _report(f)
    brief = _section(result.markdown, "Answers in brief")
    assert "Top kernel of the whole capture: `ampere_sgemm_128x64_tn` (33.3 % of its time)" in brief
    assert "Largest non-matmul work in the whole capture: `elementwise_kernel` 11.1 %." in brief
    assert (
        "Copies and memsets (no kernels): 5.000 ms (55.6 % of all time); the largest, "
        "`[CUDA memcpy HtoD]`, 1 call, 5.000 ms, all in the measured region." in brief
    )
    kernels = result.answers["answers"]["non_matmul_kernels"]["scopes"]["step"]["kernels"]
    assert [k["name"] for k in kernels] == ["elementwise_kernel"]
    assert "non-matmul kernels" not in brief


@pytest.mark.slow
def test_the_matmul_definition_says_which_convolution_kernels_count():
    """cuDNN's direct backward engines (dgrad_engine, wgrad_alg0_engine) stay convolution
    while implicit-GEMM convolutions are gemm: the definition line names both sides, and
    the matmul time the report gives is that of the ones it says count."""
    f = Frames()
    f.range(1, "backward", 0, 40)
    names = {
        "void cudnn::detail::dgrad_engine<float, 128, 6, 7, 3, 3, 5, false>": 2,
        "void cudnn::detail::wgrad_alg0_engine<float, 128, 6, 8, 3, 3, 5, false>": 3,
        "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false>": 5,
    }
    for i, (name, dur) in enumerate(names.items()):
        f.kernel(1, 1 + 10 * i, name, dur=dur)
    result = _report(f)
    share = result.answers["answers"]["matmul_share"]
    assert share["scopes"]["step"]["matmul_time_ns"] == 5 * MS
    line = next(
        x
        for x in _section(result.markdown, "Matrix multiplication's share of time").splitlines()
        if x.startswith("Matrix multiplication = ")
    )
    counted, left = line.split("; a convolution's other kernels")
    assert "implicit_convolve_sgemm" in counted and "dgrad_engine" not in counted
    assert "dgrad_engine" in left and "wgrad_alg0_engine" in left and "not counted" in left


def test_the_waits_sentence_names_the_rest_of_the_idle_time_when_it_is_not_small():
    """DLRM rank 0 of 8 on V100 (torch.profiler): 7.211 ms idle were given as launch-bound
    1.531 ms and synchronisation 3.209 ms only; the 2.468 ms before the stream's first and
    after its last operation went unsaid, none of them larger than what was said."""
    kinds = ("launch", "sync", "other_stream", "latency", "unknown", "before_first", "after_last")
    idle = dict(zip(kinds, (1_531_000, 3_209_000, 0, 3_000, 0, 1_789_000, 679_000), strict=True))
    wall = 13_009_000
    row = {
        "device_id": 0,
        "stream_id": 84,
        "wall_ns": wall,
        "busy_ns": wall - sum(idle.values()),
        "idle_ns": sum(idle.values()),
        "busy_share": 1 - sum(idle.values()) / wall,
        **{f"idle_{k}_ns": v for k, v in idle.items()},
        **{f"idle_{k}_share": v / wall for k, v in idle.items()},
    }
    answer = {"scope": "steps", "steps": 1, "step_count": 1, "devices": 1, "busiest": [row]}
    text = waits_lead({**answer, "streams": [row], "totals": {}})
    assert text.endswith(
        "waiting on synchronisations 3.209 ms; besides, 1.789 ms came before the stream's first"
        " operation and 0.679 ms came after the stream's last operation."
    )
    assert "0.003 ms" not in text  # GPU latency, a sliver of the idle time


@pytest.mark.slow
def test_the_html_says_no_step_ranges_once():
    """cs336 (phase ranges, no steps): the HTML's list of what the data cannot answer said
    'No step ranges: ...' twice, the report's note and the charts' note; one note holds both."""
    result = _report(_forward_only())
    page = report_page(result.findings)
    limits = page.split('<section class="limits">')[1].split("</section>")[0]
    items = re.findall(r"<li>(.*?)</li>", limits)
    said = [item for item in items if item.startswith("No steps in the measured region")]
    assert len(said) == 1
    assert said[0].endswith("; phases over the whole run, no step-to-step spread.")
    assert "per-step counts are unknown" in said[0]
