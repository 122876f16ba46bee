"""Launch gaps longer than a launch: the waits answer tells them apart from launch overhead.

The export below (times in ms), one stream, no step ranges:

    stream 7  K0 [1,2)  K1 [2.1,3)  K2 [8,9)  K3 [9.1,10)
              launch [2,2.1): K1 launched at 2.05, after K0 ended: overhead (0.1 ms)
              launch [3,8):   K2 launched at 7.9, after K1 ended: host work (5 ms)
              launch [9,9.1): K3 launched at 9.05: overhead (0.1 ms)

The launch_bound finding counts only gaps up to 0.25 ms (`LAUNCH_GAP`) as launch
overhead; the waits answer now says how much of its launch-bound time lies in
longer gaps, so that the two agree.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from devtools.synth import SynthExport
from nsysmap.core.wait_schemas import IDLE, LAUNCH_COST, LAUNCH_OVERHEAD_NS, STREAM_IDLE
from nsysmap.report.waits import read_waits, waits_answer
from nsysmap.report.waits_text import waits_lead, waits_section
from nsysmap.waits.tables import long_gaps
from nsysmap.waits.text import waits_line
from tests.cli_runner import nsysmap_cli

MS = 1_000_000
PID, MAIN = 7, 70
# name: (launch at, runs from, runs to)
KERNELS = {"K0": (0.5, 1, 2), "K1": (2.05, 2.1, 3), "K2": (7.9, 8, 9), "K3": (9.05, 9.1, 10)}


def _attributed(root: Path, kernels: dict[str, tuple[float, float, float]]) -> dict:
    b = SynthExport()
    b.range(PID, MAIN, 0, 11, "work")
    for corr, (name, (at, start, end)) in enumerate(kernels.items(), start=1):
        b.launch(PID, MAIN, at, at + 0.01, corr)
        b.kernel(PID, 0, 7, start, end, corr, name=name)
    path = b.write(root / "long_launch.sqlite")
    assert nsysmap_cli(["attribute", path, "-o", root / "out", "--quiet"]) == 0
    manifest = json.loads((root / "out" / "manifest.json").read_text())
    return waits_answer(read_waits(root / "out", manifest))


@pytest.fixture(scope="module")
def answer(tmp_path_factory) -> dict:
    return _attributed(tmp_path_factory.mktemp("long_launch"), KERNELS)


def test_the_long_launch_gap_is_counted_apart(answer):
    top = answer["busiest"][0]
    assert top["idle_launch_ns"] == round(5.2 * MS)  # all three launch gaps
    assert top["long_launch_ns"] == 5 * MS  # [3, 8) alone is over 0.25 ms
    assert top["long_launch_share"] == pytest.approx(5 / 9)  # of the wall time [1, 10)
    assert answer["launch_gap_ns"] == LAUNCH_OVERHEAD_NS
    assert json.loads(json.dumps(answer)) == answer


def test_the_lead_and_the_section_say_it(answer):
    lead = waits_lead(answer)
    assert (
        "launch-bound 5.200 ms (57.8 % of wall time; 5.000 ms of it in gaps over 0.250 ms," in lead
    )
    assert "host work between launches rather than launch overhead)" in lead
    section = "\n".join(waits_section(answer))
    assert "A launch gap over 0.250 ms is other host work between launches" in section


def test_only_short_launch_gaps_say_nothing_more(tmp_path):
    short = {"K0": (0.5, 1, 2), "K1": (2.05, 2.1, 3), "K2": (3.05, 3.1, 4)}
    answer = _attributed(tmp_path, short)
    assert answer["busiest"][0]["long_launch_ns"] == 0
    text = "\n".join(waits_section(answer))
    assert "launch-bound 0.200 ms (6.7 % of wall time) and waiting" in text
    assert "in gaps over" not in text and "A launch gap over" not in text


def test_every_launch_gap_long_says_all_of_it(answer):
    row = {**answer["busiest"][0], "long_launch_ns": answer["busiest"][0]["idle_launch_ns"]}
    lead = waits_lead({**answer, "busiest": [row]})
    assert "(57.8 % of wall time; all of it in gaps over 0.250 ms," in lead


def test_long_gaps_sums_only_that_kind_over_the_limit():
    gaps = pl.DataFrame(
        {
            "device_id": [0, 0, 0, 0, 1],
            "stream_id": [7, 7, 7, 8, 7],
            "kind": ["launch", "launch", "sync", "launch", "launch"],
            "dur_ns": [100, 3_000, 5_000, 250, 251],
        }
    )
    got = long_gaps(gaps, "launch", 250).sort("device_id", "stream_id").rows()
    assert got == [(0, 7, 3_000), (0, 8, 0), (1, 7, 251)]


def test_a_measured_region_counts_its_own_gaps(tmp_path):
    answer = _attributed(tmp_path, KERNELS)  # writes tmp_path / "out"
    out = tmp_path / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    ops = pl.read_parquet(out / "ops.parquet")

    def region(*names: str) -> dict:
        part = ops.filter(pl.col("name").is_in(names))
        return waits_answer(read_waits(out, manifest), region=part)["busiest"][0]

    late = region("K2", "K3")  # window [8, 10): only the short gap before K3
    assert (late["idle_launch_ns"], late["long_launch_ns"]) == (MS // 10, 0)
    middle = region("K1", "K2")  # window [2.1, 9): the long gap [3, 8)
    assert (middle["idle_launch_ns"], middle["long_launch_ns"]) == (5 * MS, 5 * MS)
    assert answer["busiest"][0]["long_launch_ns"] == 5 * MS


def test_the_note_comes_only_with_the_sentence_that_needs_it(answer):
    quiet = {**answer["busiest"][0], "long_launch_ns": 0}
    other = {**quiet, "stream_id": 8, "long_launch_ns": 5 * MS}  # listed, not in the lead
    text = "\n".join(waits_section({**answer, "busiest": [quiet], "streams": [quiet, other]}))
    assert "in gaps over" not in text and "A launch gap over" not in text


def test_the_terminal_line_tells_the_long_gaps_apart(tmp_path):
    _attributed(tmp_path, KERNELS)
    stream_idle = pl.read_parquet(tmp_path / "out" / "stream_idle.parquet")
    idle = pl.read_parquet(tmp_path / "out" / "idle.parquet")
    line = waits_line(stream_idle, idle)
    share = 100 * 5.2 / 9
    assert f"launch-bound {share:.1f}% (5.000 ms of it in gaps over 0.25 ms: host work)," in line
    assert f"launch-bound {share:.1f}%, synchronisations" in waits_line(stream_idle)
    short = idle.filter(pl.col("dur_ns") <= LAUNCH_OVERHEAD_NS)
    assert "host work" not in waits_line(stream_idle, short)


def test_long_gaps_are_those_of_the_streams_steps_only():
    """A step whose stream ran back to back (no gap in it) beside a long launch gap outside
    every step: the gaps outside are not the step's, however the tables fall back."""
    stream = {c: 0 for c in STREAM_IDLE.names()}
    stream |= {"device_id": 0, "stream_id": 7, "step": 0, "wall_ns": 2 * MS, "busy_ns": 2 * MS}
    gap = {c: None for c in IDLE.names()}
    gap |= {"device_id": 0, "stream_id": 7, "step": None, "kind": "launch"}
    gap |= {"start_ns": 0, "end_ns": 5 * MS, "dur_ns": 5 * MS, "next_op_id": 1}
    tables = {
        "stream_idle": pl.DataFrame([stream], schema=STREAM_IDLE),
        "idle": pl.DataFrame([gap], schema=IDLE),
        "launch_cost": pl.DataFrame(schema=LAUNCH_COST),
    }
    top = waits_answer(tables)["busiest"][0]
    assert (top["idle_launch_ns"], top["long_launch_ns"]) == (0, 0)
