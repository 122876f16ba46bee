"""Step windows that overlap on the GPU (steps run in a pipeline): how much they overlap,
said by the terminal line and the report (hta_recsys: five windows summing to 1,866 ms
over a capture of 1,229 ms read as "busy 10.5 % of 1,866.050 ms" with nothing said)."""

from __future__ import annotations

import polars as pl
import pytest

from nsysmap.flow.verbs import analyse, load_profile
from nsysmap.report.waits_text import waits_lead
from nsysmap.waits.gaps import windows_overlap
from nsysmap.waits.text import waits_line
from tests.corpus import REAL, needs_corpus

MS = 1_000_000


def _stream_idle(windows: dict[tuple[int, int], tuple[float, float]]) -> pl.DataFrame:
    """STREAM_IDLE-like rows, stream 7 of each device busy half of each window."""
    rows = []
    for (device, step), (start, end) in windows.items():
        wall = round((end - start) * MS)
        rows.append(
            {"device_id": device, "stream_id": 7, "step": step}
            | {"wall_start_ns": round(start * MS), "wall_end_ns": round(end * MS)}
            | {"wall_ns": wall, "busy_ns": wall // 2, "idle_ns": wall - wall // 2}
            | {f"idle_{k}_ns": 0 for k in ("sync", "launch", "other_stream", "latency")}
            | {"idle_unknown_ns": 0, "idle_before_first_ns": wall - wall // 2}
            | {"idle_after_last_ns": 0}
        )
    return pl.DataFrame(rows)


def test_the_overlap_is_the_time_in_two_windows_or_more():
    windows = {(0, 0): (0, 60), (0, 1): (50, 120), (0, 2): (100, 130), (1, 0): (0, 10)}
    windows |= {(1, 1): (20, 30)}
    got = dict(windows_overlap(_stream_idle(windows)).iter_rows())
    assert got == {0: 30 * MS, 1: 0}  # [50, 60) and [100, 120); device 1's do not touch


def test_a_window_inside_another_counts_its_whole_length():
    got = dict(windows_overlap(_stream_idle({(0, 0): (0, 100), (0, 1): (10, 20)})).iter_rows())
    assert got == {0: 10 * MS}


def test_the_terminal_line_says_how_much_the_windows_overlap():
    overlapping = _stream_idle({(0, 0): (0, 60), (0, 1): (50, 120)})
    assert "; the steps' windows overlap by 10.000 ms" in waits_line(overlapping)
    apart = _stream_idle({(0, 0): (0, 60), (0, 1): (60, 120)})
    assert "overlap" not in waits_line(apart)
    sliver = _stream_idle({(0, 0): (0, 60), (0, 1): (59.9, 120)})  # 0.1 ms of 120.1
    assert "overlap" not in waits_line(sliver)


def test_the_report_says_it_beside_the_wall_time():
    row = {"device_id": 0, "stream_id": 7, "wall_ns": 130 * MS, "busy_ns": 65 * MS}
    row |= {"idle_ns": 65 * MS, "busy_share": 0.5, "steps_overlap_ns": 10 * MS}
    row |= {f"idle_{k}_ns": 0 for k in ("sync", "launch", "other_stream", "latency", "unknown")}
    row |= {"idle_before_first_ns": 65 * MS, "idle_after_last_ns": 0, "idle_launch_share": 0.0}
    row |= {"idle_before_first_share": 0.5}
    answer = {"scope": "steps", "steps": 2, "busiest": [row], "streams": [row], "devices": 1}
    answer |= {"totals": {}, "launch_gap_ns": 250_000}
    lead = waits_lead(answer)
    assert (
        "(130.000 ms, the summed length of its steps' windows, which overlap by 10.000 ms:" in lead
    )
    assert "overlap" not in waits_lead({**answer, "busiest": [{**row, "steps_overlap_ns": 0}]})


@pytest.mark.corpus
@needs_corpus
def test_a_pipelined_trainer_says_its_steps_overlap():
    analysis = analyse(load_profile(REAL / "hta_recsys_shapes_rank0_a100.json.gz"))
    line = analysis.summary_text.split("Where the GPU waits", 1)[1].split("\n", 1)[0]
    assert "; the steps' windows overlap by 636.978 ms" in line
