"""The waits of a part of a capture (its measured region), from the written tables alone.

`window_waits` takes some of a run's operations and the capture's idle
gaps: over a whole window it gives the written stream_idle rows exactly; over
a part, each device's window is that part's, and the report's "Where the GPU
waits" covers the measured region of a profile without steps (set-up and
warm-up left out) rather than the whole capture.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from nsysmap.core.wait_schemas import STREAM_IDLE
from nsysmap.flow.verbs import analyse_file
from nsysmap.report.build import build_report
from nsysmap.report.report_files import read_run
from nsysmap.report.waits import waits_answer
from nsysmap.report.waits_text import waits_lead
from nsysmap.waits.tables import window_waits
from tests.corpus import REAL, REAL2, needs_corpus
from tests.test_waits import MS, attributed_planted

KEYS = ["device_id", "stream_id"]


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    return attributed_planted(tmp_path_factory.mktemp("waits_region"))


def _written(out: Path) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    ops = pl.read_parquet(out / "ops.parquet")
    idle = pl.read_parquet(out / "idle.parquet")
    return ops, idle, pl.read_parquet(out / "stream_idle.parquet").cast(STREAM_IDLE)


def _ms(row: dict, column: str) -> float:
    return row[column] / MS


@pytest.mark.slow
def test_each_steps_window_gives_the_written_stream_idle(out):
    ops, idle, written = _written(out)
    for step in (0, 1):
        got = window_waits(ops.filter(pl.col("step") == step), idle)[0]
        want = written.filter(pl.col("step") == step).with_columns(step=pl.lit(None, pl.Int64))
        assert_frame_equal(got.sort(KEYS), want.sort(KEYS))


@pytest.mark.slow
def test_a_part_is_its_own_window_and_its_gaps_keep_the_captures_kinds(out):
    """Step 0 without K0: the device's window starts at K1 (5.2 ms); stream 8 waits from
    there for S0 (before its first); stream 7's gaps keep their kinds."""
    ops, idle, _ = _written(out)
    part = ops.filter((pl.col("step") == 0) & (pl.col("name") != "K0"))
    rows = {r["stream_id"]: r for r in window_waits(part, idle)[0].to_dicts()}
    main, side = rows[7], rows[8]
    assert (_ms(main, "wall_start_ns"), _ms(main, "wall_end_ns")) == (5.2, 45)
    assert _ms(main, "busy_ns") == 2.8 + 2 + 2 + 2 + 2  # K1 .. K5
    kinds = {k: _ms(main, f"idle_{k}_ns") for k in ("launch", "sync", "other_stream")}
    assert kinds == {"launch": 3, "sync": 3, "other_stream": 11}
    assert _ms(main, "idle_after_last_ns") == 12 and _ms(main, "idle_latency_ns") == 0
    assert _ms(side, "idle_before_first_ns") == 20 - 5.2
    for row in rows.values():
        assert row["busy_ns"] + row["idle_ns"] == row["wall_ns"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("left_out", "unknown", "kinds"),
    [
        # K3 followed K2 with no gap: waiting from K1's end, it ended no gap of the capture
        ("K2", (8, 13), {"launch": 0, "sync": 3}),
        # K4 ended a sync gap from K3's end (15): from K2's end (13) the gap is another
        ("K3", (13, 18), {"launch": 3, "sync": 0}),
    ],
)
def test_a_gap_the_capture_does_not_have_is_of_unknown_kind(out, left_out, unknown, kinds):
    """Work of a stream left out of the part lies in a gap of the part that the capture
    does not have: its kind is unknown, never the kind of a shorter gap of the capture
    ended by the same operation (the left-out work's GPU time is not called a wait)."""
    ops, idle, _ = _written(out)
    part = ops.filter((pl.col("step") == 0) & ~pl.col("name").is_in(["K0", left_out]))
    main = window_waits(part, idle)[0].filter(pl.col("stream_id") == 7).row(0, named=True)
    assert _ms(main, "idle_unknown_ns") == unknown[1] - unknown[0]
    assert {k: _ms(main, f"idle_{k}_ns") for k in kinds} == kinds
    assert main["busy_ns"] + main["idle_ns"] == main["wall_ns"]


ALEXNET = REAL2 / "hta_param_alexnet_warmup_measure_annotations_a100.json.gz"
COURSE_FWD = REAL / "cs336a2_small_fwd_emitnvtx_shapes_a100.sqlite"


@pytest.fixture(scope="module")
def alexnet(tmp_path_factory) -> Path:
    if not ALEXNET.is_file():
        pytest.skip(f"{ALEXNET} is not in the corpus")
    out = tmp_path_factory.mktemp("alexnet") / "run"
    analyse_file(ALEXNET, out)
    return out


@pytest.mark.corpus
@needs_corpus
@pytest.mark.parametrize("path", [ALEXNET, COURSE_FWD], ids=lambda p: p.name)
def test_the_whole_capture_as_one_window_is_the_written_stream_idle(path, tmp_path):
    if not path.is_file():
        pytest.skip(f"{path} is not in the corpus")
    analyse_file(path, tmp_path / "run")
    ops, idle, written = _written(tmp_path / "run")
    for step in written["step"].unique().to_list():
        mine = pl.col("step").is_null() if step is None else pl.col("step") == step
        got = window_waits(ops.filter(mine), idle)[0]
        want = written.filter(mine).with_columns(step=pl.lit(None, pl.Int64))
        assert_frame_equal(got.sort(KEYS), want.sort(KEYS))


@pytest.mark.corpus
@needs_corpus
def test_the_waits_of_a_profile_without_steps_cover_its_measured_region(alexnet):
    """AlexNet, a warm-up pass and a measured pass in a 12.9 s capture: the section's
    streams cover the measured pass's window (27.2 ms, launch-bound), not the capture's
    12.9 s of mostly idle set-up; the phases and launch calls say they cover the capture."""
    report = build_report(read_run(alexnet))
    waits = report.answers["answers"]["waits"]
    assert (waits["scope"], waits["cost_scope"]) == ("measured region", "whole capture")
    structure = pl.read_parquet(alexnet / "structure.parquet")
    measured = structure.filter((pl.col("kind") == "region") & (pl.col("region") == "measured"))
    busiest = waits["busiest"][0]
    window = measured.filter(pl.col("device_id") == busiest["device_id"]).row(0, named=True)
    assert busiest["wall_ns"] == window["gpu_end_ns"] - window["gpu_start_ns"]
    assert busiest["idle_launch_ns"] > 0.5 * busiest["wall_ns"]
    lead = report.markdown.split("## Where the GPU waits", 1)[1]
    assert "Over the measured region, the busiest stream" in lead
    assert "Over the whole capture, the host spent" in lead
    assert "Per phase over the whole capture:" in lead


def _without_steps(out: Path, devices: tuple[int, ...]) -> dict[str, pl.DataFrame]:
    """The planted run's waits tables as a profile without steps would have them, its
    streams repeated on each of `devices` (the planted run's device first)."""
    ops, idle, _ = _written(out)
    whole = window_waits(ops, idle)[0]
    streams = pl.concat(
        [whole]
        + [whole.with_columns(device_id=pl.lit(d, whole["device_id"].dtype)) for d in devices]
    )
    cost = pl.read_parquet(out / "launch_cost.parquet").with_columns(step=pl.lit(None, pl.Int64))
    return {"stream_idle": streams, "launch_cost": cost, "idle": idle}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("others", "said"),
    [
        ((), None),
        ((3,), "Device 3 ran no operation in the measured region."),
        ((3, 5), "Devices 3 and 5 ran no operation in the measured region."),
    ],
)
def test_a_device_without_work_in_the_measured_region_is_named(out, others, said):
    """The measured region's waits cover the devices with work in it; a device whose work
    all lies outside it is named, not dropped without a word."""
    ops, _, _ = _written(out)
    region = ops.filter(pl.col("step") == 0)
    answer = waits_answer(_without_steps(out, others), region=region)
    assert answer["scope"] == "measured region"
    assert answer["devices_outside"] == list(others)
    assert answer["devices"] == region["device_id"].n_unique()
    lead = waits_lead(answer)
    assert ("ran no operation in the measured region" in lead) == (said is not None)
    if said is not None:
        assert said in lead
