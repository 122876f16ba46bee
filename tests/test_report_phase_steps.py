"""The HTML report's time-by-phase charts draw the steps its header counts, and their
caption says where those steps come from: step ranges, a range holding a forward and a
backward pass, or none (synthetic profiles)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

from nsysmap.flow.verbs import analyse, analyse_file, write
from nsysmap.report.answers import Findings
from nsysmap.report.build import build_report
from nsysmap.report.html.chart import Chart
from nsysmap.report.html.page import report_facts
from nsysmap.report.html.steps import phase_spread_chart, phase_steps_chart, steps_source
from nsysmap.report.report_files import read_run
from tests.corpus import corpus_path
from tests.frames import Frames

GEMM = "ampere_sgemm_128x64_tn"
MAIN = 1


def _pass_pair(f: Frames, at: int) -> None:
    """A forward range (a 2 ms kernel) then a backward range (a 3 ms kernel) from `at`."""
    f.range(MAIN, "forward", at + 1, at + 9)
    f.kernel(MAIN, at + 2, GEMM, dur=2)
    f.range(MAIN, "backward", at + 10, at + 19)
    f.kernel(MAIN, at + 11, GEMM, dur=3)


def _drawn(f: Frames, out: Path) -> tuple[Findings, Chart, list[str]]:
    """`nsysmap attribute` then `nsysmap report` of `f`: the findings, the per-step chart
    and its bars."""
    write(analyse(f.profile()), out)
    findings = build_report(read_run(out)).findings
    steps = phase_steps_chart(findings)
    assert steps is not None
    x = steps.figure["data"][0]["x"]
    return findings, steps, x


@pytest.mark.slow
def test_steps_from_a_range_holding_both_passes_are_drawn_and_said(tmp_path):
    """Two `profile` ranges, each holding a forward and a backward range, after a set-up
    copy: the header counts 2 steps, so the chart draws those 2 (the copy is in neither)
    and says where they come from, not 'No step ranges: every operation of the run'."""
    f = Frames()
    f.range(MAIN, "setup", 0, 5)
    f.kernel(MAIN, 1, "copy", dur=4)
    for at in (10, 30):
        f.range(MAIN, "profile", at, at + 20)
        _pass_pair(f, at)
    findings, steps, x = _drawn(f, tmp_path / "out")
    assert "Steps: 2 measured" in report_facts(findings, None)
    assert x == ["step 0", "step 1"]
    assert [row[-1] for row in steps.table.rows] == [5.0, 5.0]  # the set-up's 4 ms left out
    assert steps.caption == (
        "2 measured steps inside `profile`, no step ranges: each range `profile` holds a "
        "forward and a backward pass. One bar per step: its operations summed per phase "
        "(busy time, not wall time)."
    )
    spread = phase_spread_chart(findings)
    assert spread is not None and spread.table.rows[-1][:2] == ["step total", 2]


@pytest.mark.slow
def test_step_ranges_are_drawn_without_the_warm_up_step_the_header_leaves_out(tmp_path):
    """`step 0` inside a warm-up range, `step 1` to `step 3` after it: the header counts
    3 measured steps, and the chart draws those 3."""
    f = Frames()
    for step in range(4):
        at = 20 * step
        if step == 0:
            f.range(MAIN, "warm up", at, at + 20)
        f.range(MAIN, f"step {step}", at, at + 20)
        _pass_pair(f, at)
    findings, steps, x = _drawn(f, tmp_path / "out")
    assert "Steps: 3 measured" in report_facts(findings, None)
    assert x == ["step 1", "step 2", "step 3"]
    assert steps.caption == (
        "3 measured steps, from step ranges. One bar per step: its operations summed per "
        "phase (busy time, not wall time)."
    )


@pytest.mark.slow
def test_without_steps_the_chart_sums_the_whole_run_and_says_so(tmp_path):
    """Forward ranges only: no step at all, one bar for the whole run."""
    f = Frames()
    for at in (10, 30):
        f.range(MAIN, "forward", at + 1, at + 9)
        f.kernel(MAIN, at + 2, GEMM, dur=2)
    findings, steps, x = _drawn(f, tmp_path / "out")
    assert "Steps: none measured" in report_facts(findings, None)
    assert x == ["whole run"]
    assert steps.caption == (
        "No steps in the measured region: every operation of the run summed per phase "
        "(busy time, not wall time)."
    )
    assert phase_spread_chart(findings) is None


@pytest.mark.corpus
def test_a_profile_range_around_one_forward_and_backward_is_the_step_the_caption_names(
    tmp_path,
):
    """cs336's `profile` range holds one forward and one backward pass and no step range:
    the header says 1 step measured, and the phase chart's caption says that step is the
    range `profile`."""
    out = tmp_path / "out"
    analyse_file(corpus_path("cs336a2_small_fwdbwd_emitnvtx_shapes_a100.sqlite"), out)
    findings = build_report(read_run(out)).findings
    steps = phase_steps_chart(findings)
    assert "Steps: 1 measured" in report_facts(findings, None)
    assert steps is not None and steps.figure["data"][0]["x"] == ["step 0"]
    assert steps.caption.startswith(
        "1 step inside `profile`, no step ranges: the range `profile` holds a forward and a "
        "backward pass. One bar per step:"
    )


@pytest.mark.slow
def test_the_terminal_says_no_step_ranges_beside_the_step_the_structure_found():
    """A `profile` range around a forward and a backward range: the terminal's profile
    line said 'no steps' above 'Structure: measured: 1 step'; it says 'no step ranges'."""
    f = Frames()
    f.range(MAIN, "profile", 0, 20)
    _pass_pair(f, 0)
    text = analyse(f.profile()).summary_text
    assert "phases (100.0%); no step ranges, no modules." in text
    assert "no steps" not in text
    assert "Structure: measured: 1 step (1 forward and 1 backward passes) inside `profile`" in text


def _source(steps: list[tuple[int | None, str, str | None]], labels: list[str | None]) -> str:
    """`steps_source` of measured step rows (step label, evidence, range name) whose
    operations carry `labels` as their `step_source`."""
    structure = pl.DataFrame(
        {
            "kind": ["step"] * len(steps),
            "region": ["measured"] * len(steps),
            "step": [s for s, _, _ in steps],
            "evidence": [e for _, e, _ in steps],
            "name": [n for _, _, n in steps],
        },
        schema={
            "kind": pl.String,
            "region": pl.String,
            "step": pl.Int64,
            "evidence": pl.String,
            "name": pl.String,
        },
    )
    held = pl.DataFrame(
        {"step": list(range(len(labels))), "step_source": labels},
        schema={"step": pl.Int64, "step_source": pl.String},
    )
    return steps_source(SimpleNamespace(run=SimpleNamespace(structure=structure)), held)


def test_steps_found_in_the_kernel_sequence_or_beside_step_ranges_are_said():
    inferred = [(None, "kernel_sequence", None)]
    assert _source(inferred, [None]) == (
        "no step ranges: the step is a forward and a backward pass of the repeating kernel sequence"
    )
    assert _source(inferred * 2, [None, None]).startswith("no step ranges: each step is ")
    mixed = [(3, "range", None), (None, "range", "iteration_a"), (None, "range", "iteration_b")]
    assert _source(mixed, ["range", None, None]) == (
        "from step ranges; ranges such as `iteration_a` hold a forward and a backward pass each"
    )
    assert _source([(0, "records", None)], ["records"]) == (
        "from PyTorch's records (no range names the steps)"
    )
