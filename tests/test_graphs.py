"""CUDA graphs: whole-graph replays and graph-node operations, on synthetic nsys exports.

Whole milliseconds, checkable by hand. Each export is written in the nsys
schema by nsysmap's builder and read back through the real reader.
"""

from __future__ import annotations

import polars as pl
import pytest
from click.testing import CliRunner

from devtools.synth import SynthExport
from nsysmap.cli import cli
from nsysmap.flow.verbs import analyse_file, load_profile
from nsysmap.read.nsys.nsys_graphs import capture_points
from tests.corpus import independent_gpu_totals

MS = 1_000_000
PID, MAIN = 7, 70
LAUNCH = "cudaGraphLaunch_v10000"


def _device_totals(ops: pl.DataFrame) -> dict[int, tuple[int, int]]:
    sums = ops.group_by("device_id").agg(pl.len(), pl.col("dur_ns").sum())
    return {dev: (n, total) for dev, n, total in sums.iter_rows()}


def _steps(b: SynthExport, *steps: int) -> None:
    """Step s spans [100 s + 10, 100 s + 100) with forward, backward and optimizer phases."""
    for s in steps:
        t = 100 * s
        b.range(PID, MAIN, t + 10, t + 100, f"nsysmap:step:{s}")
        b.range(PID, MAIN, t + 10, t + 50, "nsysmap:phase:forward")
        b.range(PID, MAIN, t + 50, t + 90, "nsysmap:phase:backward")
        b.range(PID, MAIN, t + 90, t + 99, "nsysmap:phase:optimizer")


def _graph_trace_export() -> SynthExport:
    """Graph 3 captured in step 0's forward inside the root module, replayed in steps 1
    and 2; graph 5 replayed in step 1's backward; one eager optimizer kernel."""
    b = SynthExport()
    b.thread(PID, MAIN, "python")
    _steps(b, 0, 1, 2)
    b.range(PID, MAIN, 11, 49, "nsysmap:fwd:Model:")
    b.graph_event(PID, MAIN, 45, 3)  # graph 3 created while capturing
    b.graph_event(PID, MAIN, 48, 3, exec_id=9, what="Graph Instantiation")
    b.graph_event(PID, MAIN, 70, 5)  # graph 5 created in step 0's backward
    for corr, at, start, end, graph, exec_id in [
        (11, 120, 121, 141, 3, 9),  # step 1 forward: 20 ms
        (12, 160, 161, 191, 5, 10),  # step 1 backward: 30 ms
        (21, 220, 221, 241, 3, 9),  # step 2 forward: 20 ms
    ]:
        b.launch(PID, MAIN, at, at + 1, corr, api=LAUNCH)
        b.graph_replay(PID, 0, 5, start, end, corr, graph=graph, exec_id=exec_id)
    b.graph_replay(PID, 0, 5, 301, 311, 99, graph=3, exec_id=9)  # launched before the capture
    b.launch(PID, MAIN, 250, 251, 31, api=LAUNCH)
    b.graph_replay(PID, 0, 5, 0, 0, 31, graph=3, exec_id=9)  # CUPTI could not time it
    b.launch(PID, MAIN, 195, 196, 13)
    b.kernel(PID, 0, 5, 196, 198, 13, name="multi_tensor_apply_kernel")  # 2 ms
    return b


@pytest.fixture
def graph_trace(tmp_path):
    return _graph_trace_export().write(tmp_path / "graph_trace.sqlite")


@pytest.mark.slow
def test_graph_replays_are_ops_attributed_through_their_launch(graph_trace, tmp_path):
    analysis = analyse_file(graph_trace, tmp_path / "out")
    ops = analysis.ops.sort("op_id")
    replays = ops.filter(pl.col("kind") == "graph")
    assert replays.select("name", "short_name", "category", "graph_id").row(0) == (
        "CUDA graph 3 (exec 9)",
        "CUDA graph 3",
        "graph",
        3,
    )
    got = replays.select("correlation_id", "dur_ns", "step", "phase", "attribution", "launch_api")
    assert got.rows() == [
        (11, 20 * MS, 1, "forward", "range", LAUNCH),
        (12, 30 * MS, 1, "backward", "range", LAUNCH),
        (21, 20 * MS, 2, "forward", "range", LAUNCH),
        (99, 10 * MS, None, None, "no_launch", None),
        (31, 0, 2, "backward", "range", LAUNCH),
    ]
    # Graph 3 was captured inside the root module in step 0: module from there,
    # step and phase from the replay.
    first = replays.row(0, named=True)
    assert first["module"] == "" and first["module_class"] == "Model"
    assert first["capture_range_path"] == (
        "nsysmap:step:0 > nsysmap:phase:forward > nsysmap:fwd:Model:"
    )
    graph5 = replays.row(1, named=True)
    assert graph5["module"] is None
    assert graph5["capture_range_path"] == "nsysmap:step:0 > nsysmap:phase:backward"


@pytest.mark.slow
def test_graph_replays_conserve_time_per_device(graph_trace, tmp_path):
    analysis = analyse_file(graph_trace, tmp_path / "out")
    expected = {0: (6, 82 * MS)}  # 20 + 30 + 20 + 10 + 0 ms of replays, 2 ms of optimizer
    assert _device_totals(analysis.ops) == independent_gpu_totals(graph_trace) == expected
    categories = dict(analysis.summaries.by_category.select("category", "time_ns").iter_rows())
    assert categories == {"graph": 80 * MS, "optimizer": 2 * MS}
    by_step = dict(analysis.summaries.by_step.select("step", "time_ns").iter_rows())
    assert by_step == {1: 52 * MS, 2: 20 * MS, None: 10 * MS}


def test_untimed_replay_leaves_the_capture_window_alone(graph_trace):
    meta = dict(load_profile(graph_trace).meta.rows())
    assert int(meta["capture_start_ns"]) == 10 * MS
    assert (meta["graph_replays"], meta["graph_replay_time_ns"]) == ("5", str(80 * MS))


@pytest.mark.slow
def test_summary_names_graph_time_and_how_to_see_inside(graph_trace, tmp_path):
    result = CliRunner().invoke(cli, ["attribute", str(graph_trace), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    text = result.stdout
    lines = [line for line in text.splitlines() if line.startswith("CUDA graphs:")]
    assert lines == [
        "CUDA graphs: 5 replays, 80.000 ms (97.6% of GPU time), traced whole: no per-kernel"
        " detail inside them (profile with `nsys profile --cuda-graph-trace=node` to see it)."
    ]


def _node_export() -> SynthExport:
    """Nodes 101..103 captured in step 0 inside modules fc1 / fc2, cloned into 201..203
    when graph 7 is instantiated, replayed in steps 1 and 2 (7 ms a replay)."""
    b = SynthExport()
    b.thread(PID, MAIN, "python")
    _steps(b, 0, 1, 2)
    b.range(PID, MAIN, 12, 20, "nsysmap:fwd:Linear:fc1")
    b.range(PID, MAIN, 12.5, 14, "aten::addmm")
    b.range(PID, MAIN, 22, 30, "nsysmap:fwd:Linear:fc2")
    for node, at in [(101, 13), (102, 23), (103, 26)]:
        b.graph_node_event(PID, MAIN, at, node)
    for node in (101, 102, 103):
        b.graph_node_event(PID, MAIN, 40, node + 100, original=node)
    for corr, t in [(50, 110), (60, 210)]:
        b.launch(PID, MAIN, t, t + 1, corr, api=LAUNCH)
        b.kernel(PID, 0, 5, t + 1, t + 5, corr, name="gemm_fc1", graph_node=201, graph=7)
        b.kernel(PID, 0, 5, t + 5, t + 7, corr, name="gemm_fc2", graph_node=202, graph=7)
        b.memset(PID, 0, 5, t + 7, t + 8, corr, graph_node=203)
    b.kernel(PID, 0, 5, 223, 224, 60, name="dangling", graph_node=299, graph=7)
    b.range(PID, MAIN, 229, 235, "nsysmap:fwd:Linear:head")
    b.launch(PID, MAIN, 230, 231, 61)
    b.kernel(PID, 0, 5, 231, 233, 61, name="eager_head")
    return b


@pytest.fixture
def node_mode(tmp_path):
    return _node_export().write(tmp_path / "node_mode.sqlite")


@pytest.mark.slow
def test_graph_node_kernels_take_module_from_capture_and_step_from_replay(node_mode, tmp_path):
    ops = analyse_file(node_mode, tmp_path / "out").ops.sort("op_id")
    columns = ["name", "step", "phase", "module", "aten_op", "graph_node_id", "graph_id"]
    rows = ops.filter(pl.col("correlation_id") == 60).select(columns).rows()
    assert rows == [
        ("gemm_fc1", 2, "forward", "fc1", "aten::addmm", 201, 7),
        ("gemm_fc2", 2, "forward", "fc2", None, 202, 7),
        ("dangling", 2, "forward", None, None, 299, 7),
        ("[CUDA memset]", 2, "forward", "fc2", None, 203, None),
    ]
    fc1 = ops.filter(pl.col("name") == "gemm_fc1")
    assert fc1["step"].to_list() == [1, 2] and set(fc1["launch_api"]) == {LAUNCH}
    assert set(fc1["capture_range_path"]) == {
        "nsysmap:step:0 > nsysmap:phase:forward > nsysmap:fwd:Linear:fc1 > aten::addmm"
    }
    assert fc1["range_path"].to_list() == [
        "nsysmap:step:1 > nsysmap:phase:forward",
        "nsysmap:step:2 > nsysmap:phase:forward",
    ]
    eager = ops.filter(pl.col("name") == "eager_head").row(0, named=True)
    assert (eager["module"], eager["graph_node_id"], eager["capture_range_path"]) == (
        "head",
        None,
        None,
    )


@pytest.mark.slow
def test_node_mode_conserves_time_and_says_so(node_mode, tmp_path):
    result = CliRunner().invoke(cli, ["attribute", str(node_mode), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    text = result.stdout
    ops = pl.read_parquet(tmp_path / "out" / "ops.parquet")
    expected = {0: (8, 17 * MS)}  # 2 replays x (4 + 2 + 1) ms, 1 ms dangling, 2 ms eager
    assert _device_totals(ops) == independent_gpu_totals(node_mode) == expected
    modules = pl.read_parquet(tmp_path / "out" / "by_module.parquet")
    assert dict(modules.select("module", "time_ns").iter_rows()) == {
        "fc1": 8 * MS,
        "fc2": 6 * MS,
        "head": 2 * MS,
        "": 0,  # the root module launches nothing itself: a row, inclusive time only
        None: 1 * MS,
    }
    assert (
        "CUDA graphs: 7 operations ran as graph nodes, 15.000 ms (88.2% of GPU time);"
        " 6 also attributed to the ranges open where they were captured." in text
    )
    assert "cuda-graph-trace=node" not in text


@pytest.mark.slow
def test_older_exports_keep_node_events_in_cuda_graph_events(tmp_path):
    b = _node_export()
    nodes = b.tables()["CUDA_GRAPH_NODE_EVENTS"]
    b.table("CUDA_GRAPH_EVENTS", nodes)  # the 2022-era name, same columns
    path = b.write(
        tmp_path / "old.sqlite",
        omit=("CUDA_GRAPH_NODE_EVENTS",),
        exact_columns=["CUDA_GRAPH_EVENTS"],
    )
    ops = analyse_file(path, tmp_path / "out").ops
    assert ops.filter(pl.col("name") == "gemm_fc2")["module"].to_list() == ["fc2", "fc2"]


def test_capture_points_follow_clones_to_the_original():
    events = pl.DataFrame(
        {
            "pid": [1, 1, 1, 1, 1, 1, 1],
            "tid": [5, 6, 6, 6, 6, 6, 6],
            "t": [10, 20, 30, 40, 50, 60, 15],
            "id": [1, 2, 3, 4, 8, 9, 1],
            "original": [None, 1, 2, 77, 9, 8, None],
        }
    )
    # 3 -> 2 -> 1 (created at 10 on thread 5; its later event at 15 is not its creation);
    # 4 -> 77, never recorded; 8 <-> 9, a cycle.
    points = capture_points(events).sort("id")
    assert points.rows() == [
        (1, 1, 5, 10),
        (1, 2, 5, 10),
        (1, 3, 5, 10),
        (1, 4, None, None),
        (1, 8, None, None),
        (1, 9, None, None),
    ]


def test_exports_with_only_graph_replays_are_read(tmp_path):
    b = SynthExport()
    b.launch(PID, MAIN, 1, 2, 1, api=LAUNCH)
    b.graph_replay(PID, 0, 5, 2, 6, 1, graph=1, exec_id=2)
    ops = analyse_file(b.write(tmp_path / "only.sqlite"), tmp_path / "out").ops
    assert ops.select("kind", "dur_ns", "launch_api").rows() == [("graph", 4 * MS, LAUNCH)]
