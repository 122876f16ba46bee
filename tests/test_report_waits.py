"""The waits answer and its report section, on the planted export of tests/test_waits.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsysmap.report.html.waits_chart import waits_chart
from nsysmap.report.waits import NO_TABLES, read_waits, waits_answer
from nsysmap.report.waits_text import waits_section
from tests.test_waits import attributed_planted

MS = 1_000_000


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return attributed_planted(tmp_path_factory.mktemp("report_waits"))


@pytest.fixture(scope="module")
def answer(run) -> dict:
    manifest = json.loads((run / "manifest.json").read_text())
    return waits_answer(read_waits(run, manifest))


@pytest.mark.slow
def test_the_answer_is_json_and_covers_the_steps(answer):
    assert json.loads(json.dumps(answer)) == answer
    assert answer["unknown"] is None
    assert (answer["scope"], answer["steps"]) == ("steps", 2)


@pytest.mark.slow
def test_the_busiest_stream_adds_up_over_the_steps(answer):
    top = answer["streams"][0]
    assert (top["device_id"], top["stream_id"], top["steps"]) == (0, 7, 2)
    assert top["wall_ns"] == 43 * MS + 8.5 * MS  # step 0 [2, 45), step 1 [61.5, 70)
    kinds = [k for k in top if k.startswith("idle_") and k.endswith("_ns") and k != "idle_ns"]
    assert top["busy_ns"] + sum(top[k] for k in kinds) == top["wall_ns"]
    assert top["idle_sync_ns"] == 3 * MS + 2 * MS  # [15, 18) and the .item() gap [65, 67)


def test_modules_are_ranked_by_the_idle_time_before_them(answer):
    modules = [(m["module"], m["idle_before_ns"]) for m in answer["modules"]]
    assert modules == [("d", 11 * MS), ("b", 3 * MS), ("c", 3 * MS), ("a", MS // 5)]
    b = next(m for m in answer["modules"] if m["module"] == "b")
    assert b["launch_bound_share"] == pytest.approx(3 / 7)  # 3 ms idle before 4 ms of kernels


def test_the_section_is_rendered_from_the_answer_alone(answer):
    text = "\n".join(waits_section(answer))
    assert text.startswith("## Where the GPU waits")
    assert "device 0, stream 7" in text and "`d` | forward | 2.000 ms | 11.000 ms" in text
    # The first sentence names the busiest stream of each device (`busiest`).
    changed = {**answer, "busiest": [{**answer["busiest"][0], "idle_launch_ns": 123 * MS}]}
    assert "launch-bound 123.000 ms" in "\n".join(waits_section(changed))


def test_outputs_without_waits_tables_say_so(run):
    answer = waits_answer(read_waits(run, {"tables": {"ops": {"file": "ops.parquet"}}}))
    assert answer["unknown"] == NO_TABLES
    assert waits_section(answer)[-2] == f"Not known: {NO_TABLES}."


def test_the_chart_stacks_each_phase_busy_and_waiting(answer):
    chart = waits_chart(answer)
    assert chart is not None and chart.id == "waits"
    traces = {t["name"]: dict(zip(t["x"], t["y"], strict=True)) for t in chart.figure["data"]}
    forward = {name: values["forward"] for name, values in traces.items()}
    # step 0's forward phase on both streams: kernels K0-K5 and S0, S1; the gaps before them
    assert forward["GPU busy"] == pytest.approx(13.8 + 15)
    assert forward["launch-bound idle"] == 3 + 10  # [8, 11) and [30, 40)
    assert forward["synchronisation idle"] == 3
    assert forward["other stream / communication wait"] == 11
    assert forward["other idle (GPU latency, unknown, stream start)"] == pytest.approx(0.2 + 18)
    assert json.loads(json.dumps(chart.to_dict()))["table"]["rows"]
    assert waits_chart({**answer, "unknown": NO_TABLES}) is None
