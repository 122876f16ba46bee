"""`nsysmap export --perfetto`: Chrome trace-event JSON validated against the format.

The training sample (tests/test_report.py has its timeline) has 146 GPU
operations: 72 per step on stream 7 and, outside the steps, an NCCL kernel
on stream 9 (0-3 ms) and an add after the last step. Step 0 runs on the GPU
from 1 to 159 ms, step 1 from 161 to 319 ms (by_step.csv of the golden files).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from devtools.synth.bulk import write_export
from devtools.synth.tile import gpt_tables
from nsysmap.cli import cli
from nsysmap.export.perfetto import Selection, op_tracks, trace_text
from nsysmap.export.spans import SPAN, nest
from nsysmap.flow.verbs import analyse_file
from nsysmap.report.report_files import read_run
from tests.cli_runner import nsysmap_cli
from tests.corpus import corpus_path, needs_corpus

SAMPLES = Path(__file__).resolve().parent.parent / "sample_reports"
CUDA_TRACE = Path(__file__).parent / "data" / "cuda" / "gpt2_tiny_nsysmap_run_h100.json.gz"
META_NAMES = {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}


def validate(trace: dict) -> dict[tuple[int, int], list[dict]]:
    """Check the trace-event format; returns the X events per (pid, tid) track."""
    assert isinstance(trace["traceEvents"], list)
    tracks: dict[tuple[int, int], list[dict]] = defaultdict(list)
    named = set()
    for event in trace["traceEvents"]:
        assert event["ph"] in ("X", "M"), event
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int), event
        if event["ph"] == "M":
            assert event["name"] in META_NAMES and isinstance(event["args"], dict)
            named.add((event["pid"], event["tid"]))
            continue
        assert isinstance(event["name"], str) and isinstance(event["cat"], str)
        assert event["ts"] >= 0 and event["dur"] >= 0
        tracks[(event["pid"], event["tid"])].append(event)
    for key, events in tracks.items():
        assert key in named, f"track {key} has no thread_name"
        stack: list[float] = []
        for before, event in zip([None, *events], events, strict=False):
            assert before is None or before["ts"] <= event["ts"], f"ts not monotonic on {key}"
            end = event["ts"] + event["dur"]
            while stack and stack[-1] <= event["ts"] + 1e-9:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-9, f"{event['name']} crosses on {key}"
            stack.append(end)
    return tracks


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("export")
    analyse_file(SAMPLES / "gpt2_tiny_train.sqlite", root / "train")
    analyse_file(write_export(root / "g.sqlite", gpt_tables(1500, seed=5)), root / "gpt12")
    analyse_file(CUDA_TRACE, root / "cuda")
    return {"train": root / "train", "gpt12": root / "gpt12", "cuda": root / "cuda"}


def export(run: Path, tmp_path: Path, *options: str) -> dict:
    target = tmp_path / "trace.json"
    result = CliRunner().invoke(cli, ["export", str(run), "--perfetto", str(target), *options])
    assert result.exit_code == 0, result.output
    return json.loads(target.read_text())


def by_track(trace: dict) -> dict[str, list[dict]]:
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    return {names[key]: events for key, events in validate(trace).items()}


@pytest.mark.slow
def test_training_sample_as_a_trace(runs, tmp_path):
    trace = export(runs["train"], tmp_path)
    tracks = by_track(trace)
    assert len(tracks["stream 7"]) == 145 and len(tracks["stream 9"]) == 1
    steps = [(e["name"], e["ts"], e["dur"]) for e in tracks["steps"]]
    assert steps == [("step 0", 1000.0, 158000.0), ("step 1", 161000.0, 158000.0)]
    phases = [e["name"] for e in tracks["phases"] if e["args"]["step"] == 0]
    assert phases == ["data", "forward", "loss", "backward", "optimizer"]
    gemm = next(e for e in tracks["stream 7"] if e["cat"] == "gemm")
    assert gemm["cname"] == "thread_state_running"
    assert gemm["args"]["kernel"] == "ampere_sgemm_128x64_tn"
    assert {"step", "phase", "module", "range_path", "module_class"} <= set(gemm["args"])
    assert trace["otherData"]["operations"] == 146


@pytest.mark.slow
def test_module_spans_nest_and_count_their_operations(runs, tmp_path):
    tracks = by_track(export(runs["train"], tmp_path, "--steps", "0"))
    modules = {
        (e["name"], e["args"]["phase"]): e for e in tracks["modules"] if e["args"]["step"] == 0
    }
    block, mlp = (
        modules[("transformer.h.1", "backward")],
        modules[("transformer.h.1.mlp", "backward")],
    )
    assert (block["args"]["ops"], mlp["args"]["ops"]) == (18, 5)  # gemms twice in backward
    assert block["ts"] <= mlp["ts"] and mlp["ts"] + mlp["dur"] <= block["ts"] + block["dur"]
    assert mlp["dur"] == 17000.0  # c_proj 8 + act 1 + c_fc 8 ms, back to back


@pytest.mark.slow
def test_steps_and_window_limit_the_trace(runs, tmp_path):
    one = by_track(export(runs["train"], tmp_path, "--steps", "1"))
    assert {e["args"]["step"] for e in one["stream 7"]} == {1}
    assert len(one["stream 7"]) == 72 and "stream 9" not in one
    window = by_track(export(runs["train"], tmp_path, "--window", "0:2.5"))
    names = [e["name"] for t in ("stream 7", "stream 9") for e in window.get(t, [])]
    assert names == ["[CUDA memcpy HtoD]", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"]


@pytest.mark.slow
def test_two_gpus_and_two_streams(runs, tmp_path):
    trace = export(runs["gpt12"], tmp_path)
    tracks = validate(trace)
    assert {pid for pid, _ in tracks} == {0, 1}
    ops = read_run(runs["gpt12"]).ops
    assert (
        sum(e["cat"] not in ("steps", "phases", "modules") for v in tracks.values() for e in v)
        == ops.height
    )


@pytest.mark.slow
def test_a_real_cuda_trace_validates(runs, tmp_path):
    trace = export(runs["cuda"], tmp_path)
    tracks = by_track(trace)
    assert len(tracks["steps"]) == 3 and tracks["modules"]


def test_overlapping_operations_of_one_stream_get_a_second_track():
    ops = pl.DataFrame(
        {
            "op_id": [1, 2, 3, 4],
            "device_id": [0] * 4,
            "stream_id": [7] * 4,
            "tid": [None] * 4,
            "start_ns": [0, 5, 6, 20],
            "end_ns": [10, 15, 8, 30],
        },
        schema_overrides={"tid": pl.Int64},
    )
    lanes = op_tracks(ops).sort("op_id")
    assert lanes["lane"].to_list() == [0, 1, 2, 0]
    assert lanes["track"].to_list()[:2] == ["stream 7", "stream 7 (overlap 1)"]


def test_nest_cuts_crossing_spans():
    rows = [
        (0, "modules", "p", 1, 0, 100),
        (0, "modules", "a", 2, 0, 60),
        (0, "modules", "a.x", 3, 10, 60),
        (0, "modules", "b", 2, 50, 120),
    ]
    spans = pl.DataFrame([(*r, None, None, None, None, 1) for r in rows], schema=SPAN, orient="row")
    got = {r["name"]: (r["start_ns"], r["end_ns"]) for r in nest(spans).iter_rows(named=True)}
    assert got == {"p": (0, 100), "a": (0, 50), "a.x": (10, 50), "b": (50, 100)}


def test_selection_keeps_operations_that_overlap_the_window():
    ops = pl.DataFrame(
        {
            "step": [0, 0, 1],
            "start_ns": [0, 900_000, 2_000_000],
            "end_ns": [100, 1_100_000, 2_500_000],
        }
    )
    assert Selection(window_ms=(1.0, 2.0)).apply(ops, 0)["start_ns"].to_list() == [900_000]
    assert Selection(steps=(1,)).apply(ops, 0).height == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    ("options", "code"),
    [(["--steps", "x"], 2), (["--window", "5:1"], 2), (["--steps", "9"], 2)],
)
def test_bad_options_exit_with_usage(runs, tmp_path, options, code):
    target = tmp_path / "t.json"
    assert nsysmap_cli(["export", str(runs["train"]), "--perfetto", str(target), *options]) == code
    assert not target.exists()


def test_missing_directory(tmp_path):
    assert (
        nsysmap_cli(["export", str(tmp_path / "nope"), "--perfetto", str(tmp_path / "t.json")]) == 3
    )


@pytest.mark.slow
def test_trace_text_counts_what_it_wrote(runs):
    run = read_run(runs["train"])
    text, count = trace_text(run.ops, {0: "GPU"}, Selection(steps=(0,)))
    assert count == 72 and json.loads(text)["otherData"]["steps"] == [0]


@needs_corpus
@pytest.mark.corpus
@pytest.mark.parametrize(
    "name", ["vecadd_streams_t4_gpu4.sqlite", "fastvideo_training_mfu_h100x2_before.sqlite"]
)
def test_real_exports_give_valid_traces(name, tmp_path):
    analyse_file(corpus_path(name), tmp_path / "out")
    ops = read_run(tmp_path / "out").ops
    text, count = trace_text(ops, {}, Selection())
    tracks = validate(json.loads(text))
    assert count == ops.height
    per_op = [
        e for v in tracks.values() for e in v if e["cat"] not in ("steps", "phases", "modules")
    ]
    assert len(per_op) == ops.height
    rounding = 0.0005 * ops.height  # each duration is rounded to the nanosecond
    assert sum(e["dur"] for e in per_op) == pytest.approx(ops["dur_ns"].sum() / 1000, abs=rounding)
