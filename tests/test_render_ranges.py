"""The terminal summary: what the profile carries and lacks, and its top ranges."""

from __future__ import annotations

import pytest

from nsysmap.attribution.attribute import attribute
from nsysmap.summaries import summary_text as render
from nsysmap.summaries.summarise import summarise
from nsysmap.summaries.summary_text import render_summary
from tests.frames import Frames

META = {"backend": "nsys", "source_path": "run.sqlite"}


def _text(f: Frames) -> str:
    report = f.profile()
    return render_summary(summarise(attribute(report), report.ranges), META)


def _user_profile() -> Frames:
    """Plain NVTX ranges and PyTorch operator ranges: a phase, no step, no module."""
    f = Frames()
    f.range(1, "forward pass", 0, 100)
    f.range(1, "attention", 10, 60)
    f.range(1, "computing softmax", 20, 40)
    f.range(1, "aten::softmax, seq = 3, op_id = 9, sizes = [[4, 4]]", 21, 30)
    f.kernel(1, 22, dur=3)
    f.range(1, "final matmul", 45, 55)
    f.kernel(1, 46, dur=5)
    f.kernel(1, 70, dur=2)
    return f


def test_a_profile_without_nsysmaps_ranges_says_what_it_has_and_lacks():
    text = _text(_user_profile())
    profile = [line for line in text.splitlines() if line.startswith("Profile:")]
    assert profile == [
        "Profile: user ranges, PyTorch operator ranges, phases (100.0%); no step ranges, no "
        "modules. To get them: `nsysmap run SCRIPT` (all three), NVTX / `record_function` "
        "ranges named `step N`, `forward`, `backward`, `optimizer` (steps, phases), torch.profiler "
        "`with_modules=True` (modules)."
    ]
    assert "Of all time" not in text
    assert "\nShares below are of all GPU time, devices together.\n" in text  # their base
    assert "Top modules" not in text and "(none)" not in text  # only the null group
    assert "GPU time by phase" in text  # the phase is known


def test_top_ranges_show_the_users_ranges_by_time_inside():
    lines = _text(_user_profile()).split("Top ranges")[1].split("\n\n")[0].splitlines()
    rows = [line.split() for line in lines[1:-1]]
    assert [r[:-4] for r in rows] == [
        ["forward", "pass"],
        ["forward", "pass", ">", "attention"],
        ["forward", "pass", ">", "attention", ">", "final", "matmul"],
        ["forward", "pass", ">", "attention", ">", "computing", "softmax"],
    ]
    assert rows[0][-4:] == ["1", "2.000", "10.000", "100.0%"]
    assert rows[3][-4:] == ["1", "0.000", "3.000", "30.0%"]
    assert lines[-1] == "  ... 1 more in by_range.parquet"  # the operator range


def test_a_profile_with_only_nsysmaps_ranges_keeps_the_known_shares_line():
    f = Frames()
    f.range(1, "nsysmap:step:0", 0, 100)
    f.range(1, "nsysmap:phase:forward", 1, 90)
    f.range(1, "nsysmap:fwd:Linear:fc", 2, 50)
    f.kernel(1, 3, dur=4)
    text = _text(f)
    assert "Of all time, 100.0% has a step, 100.0% has a phase, 100.0% has a module." in text
    assert "Profile:" not in text
    # Top ranges: nsysmap's step and phase ranges, which hold all the time; not its modules.
    rows = [line.split()[:-4] for line in _section(text)]
    assert rows == [["nsysmap:step:*"], ["nsysmap:step:*", ">", "nsysmap:phase:forward"]]
    assert "inside none of these ranges" not in text


def _section(text: str) -> list[str]:
    """The lines of the top ranges section below its header, but `... N more`."""
    lines = text.split("Top ranges")[1].split("\n\n")[0].splitlines()[1:]
    return [line for line in lines if not line.startswith("  ...")]


@pytest.mark.slow
def test_operator_ranges_alone_are_shown_but_not_beside_nsysmaps_ranges():
    f = Frames()
    f.range(1, "aten::mm, seq = 1, op_id = 2", 0, 10)
    f.kernel(1, 1, dur=2)
    assert "  aten::mm  " in _text(f).split("Top ranges")[1]
    f.range(1, "nsysmap:phase:forward", 0, 20)
    rows = _section(_text(f))
    assert [row.split()[0] for row in rows] == ["nsysmap:phase:forward"]


def test_slivers_of_the_users_ranges_give_way_to_nsysmaps_ranges():
    """autograd's `BackwardHookFunction` ranges hold a sliver of the time each."""
    f = Frames()
    f.range(1, "nsysmap:step:0", 0, 1000)
    f.range(1, "nsysmap:phase:forward", 1, 900)
    f.range(1, "BackwardHookFunction", 2, 3)
    f.kernel(1, 2, dur=1)
    f.kernel(1, 10, dur=400)
    f.kernel(2, 1100, dur=100)  # after every range: outside
    rows = _section(_text(f))
    assert [row.split()[-1] for row in rows[:2]] == ["80.0%", "80.0%"]
    assert not any("BackwardHookFunction" in row for row in rows)
    assert rows[-1].startswith("  100.000 ms (20.0%) is inside none of these ranges")


def test_only_slivers_are_listed_when_nothing_else_is_there():
    f = Frames()
    f.range(1, "tiny", 0, 10)
    f.kernel(1, 1, dur=1)
    f.kernel(2, 20, dur=999)
    rows = _section(_text(f))
    assert rows[0].split()[0] == "tiny" and rows[0].split()[-1] == "0.1%"


def test_a_profile_without_ranges_says_how_to_get_them():
    f = Frames()
    f.kernel(1, 1, dur=2)
    text = _text(f)
    assert "Profile: no ranges; no step ranges, no phases, no modules." in text
    assert "`emit_nvtx` (operator ranges)" in text
    assert "by phase" not in text and "Top modules" not in text and "Top ranges" not in text


def test_long_paths_are_cut_at_a_separator_from_the_left(monkeypatch):
    monkeypatch.setattr(render, "MAX_LABEL", 20)
    assert render._path_label("a > b") == "a > b"
    assert render._path_label("first > second > third > last") == "… > third > last"
    assert render._path_label("first > a name far too long") == "… > a name far too…"
    assert render._path_label("a single name far too long") == "a single name far t…"


def test_long_module_paths_keep_their_innermost_names(monkeypatch):
    """switchtransformer: two Linear modules of one FeedForward read the same once their
    path was cut at its end ("...FeedForward_9.… (Linear)")."""
    monkeypatch.setattr(render, "MAX_LABEL", 20)
    assert render._label("model.block_2.ff_9") == "model.block_2.ff_9"
    assert render._label("model.block_2.ff_9.linear_27") == "…ff_9.linear_27"
    assert render._label("model.block_2.ff_9.linear_28") == "…ff_9.linear_28"
    assert render._label("a_name_far_too_long_for_it") == "a_name_far_too_long…"
    assert render._label("model.a_leaf_far_too_long_for_it") == "model.a_leaf_far_to…"


def test_time_outside_the_shown_ranges_is_named_with_its_likely_cause():
    """A kernel launched after every range, from a thread with none, is inside none."""
    f = _user_profile()  # 10 ms of kernels on thread 1, all in "forward pass"
    f.range(1, "backward pass", 100, 200)
    f.kernel(2, 300, dur=8)  # after every range: no step or phase to take either
    ranges = [line for line in _text(f).splitlines() if "inside none of these ranges" in line]
    assert ranges == [
        "  8.000 ms (44.4%) is inside none of these ranges: launched outside every range, "
        "or inside ranges not listed here (by_range.parquet has them all)"
    ]


def test_kernels_inside_their_own_threads_ranges_count_in_the_phase_range_too():
    """autograd's thread has operator ranges of its own: its kernels still count
    inside the user's `backward pass`, which gave them their phase."""
    f = _user_profile()
    f.range(1, "backward pass", 100, 200)
    f.range(2, "autograd::engine::evaluate_function: MmBackward0", 140, 160)
    f.kernel(2, 150, dur=8)
    text = _text(f)
    assert "inside none of these ranges" not in text
    (line,) = [line for line in text.splitlines() if line.lstrip().startswith("backward pass")]
    assert line.split()[-2:] == ["8.000", "44.4%"]


@pytest.mark.slow
def test_kernels_of_a_thread_without_ranges_count_in_the_range_that_gave_their_phase():
    f = _user_profile()
    f.range(1, "backward pass", 100, 200)
    f.kernel(2, 150, dur=8)  # from the autograd thread: phase backward, no range of its own
    text = _text(f)
    assert "inside none of these ranges" not in text
    (line,) = [line for line in text.splitlines() if line.lstrip().startswith("backward pass")]
    assert line.split()[-2:] == ["8.000", "44.4%"]


def test_no_outside_line_when_the_ranges_hold_all_the_time():
    f = Frames()
    f.range(1, "forward pass", 0, 100)
    f.kernel(1, 10, dur=3)
    assert "inside none of these ranges" not in _text(f)


def test_work_outside_every_phase_is_named_as_the_report_names_it():
    """The terminal's phase table names the row without a phase `(outside every phase)`,
    as report.md's phase and waits tables do, not a bare `(none)`."""
    f = Frames()
    f.range(1, "forward", 0, 10)
    f.kernel(1, 1, "ampere_sgemm_128x64_tn", dur=3)
    f.kernel(1, 20, "elementwise_kernel", dur=1)
    phases = _text(f).split("GPU time by phase")[1].split("\n\n")[0]
    assert "\n  (outside every phase)" in phases and "(none)" not in phases


def test_the_top_kernels_title_says_when_it_lists_copies():
    """vecAdd on a T4: the 'Top kernels' were two copies and one kernel; the title says
    the table holds copies (and sets) too, and a table of kernels only is 'Top kernels'."""
    f = Frames()
    f.kernel(1, 1, "vecAdd", dur=1)
    assert "\nTop kernels  " in _text(f)
    f.kernel(1, 3, "[CUDA memcpy HtoD]", dur=2, kind="memcpy")
    f.kernel(1, 6, "[CUDA memset]", dur=1, kind="memset")
    text = _text(f)
    assert "\nTop kernels, copies and memsets  " in text and "\nTop kernels  " not in text


def test_a_long_kernel_name_with_a_dot_is_cut_at_its_end(monkeypatch):
    monkeypatch.setattr(render, "MAX_LABEL", 20)
    assert render._label("void kernel<float, 2.5f>(int)") == "void kernel<float, …"
