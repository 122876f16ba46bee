"""Modules, backward links and phases from what torch.profiler traces already hold.

A hand-written CUDA trace of a two-block model (times in whole µs, every
expected value worked out by hand below), and a CPU trace recorded here with
torch (`with_stack=True, with_modules=True`) checked against a stack walk over
its own JSON.

    main   ProfilerStep#3 [0, 300)
           ## forward ## [5, 105)
             nn.Module: Net_0 [10, 100)
               Block_0 [12, 40) > Linear_0 [13, 30) > aten::linear [14, 25) seq 7
                                                      > aten::addmm [15, 24) seq 7 -> k1 [31, 35)
               Block_1 [42, 70) > Linear_1 [43, 60) > aten::addmm [44, 54) seq 8 -> k2 [47, 53)
               aten::add [80, 85) seq 9                                         -> k3 [86, 88)
           aten::copy_ [110, 115)                                               -> memcpy [113, 114)
           ## backward ## [120, 200)
    autograd AddmmBackward0 [130, 140) (fwdbwd flow from aten::addmm at 15)     -> k5 [133, 136)
             AddmmBackward0 [150, 160) Sequence number 8                        -> k6 [153, 158)
"""

from __future__ import annotations

import json
import warnings
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

from nsysmap.attribution.labels import name_labels
from nsysmap.flow.verbs import analyse, analyse_file, load_profile
from nsysmap.read.torch.torch_trace import read_trace
from nsysmap.report.build import build_report
from nsysmap.report.report_files import read_run
from tests.torch_traces import AUTOGRAD, complete, flow, kernel, launch, module, op, write_trace

L0, L1 = "Net_0.Block_0.Linear_0", "Net_0.Block_1.Linear_1"
ADDMM_DIMS = [[32], [8, 16], [16, 32], [], []]
BF16 = ["c10::BFloat16"] * 3 + ["Scalar", "Scalar"]


def _forward() -> list[dict]:
    return [
        complete("user_annotation", "ProfilerStep#3", 0, 300),
        complete("user_annotation", "## forward ##", 5, 100),
        module("Net_0", 10, 90, 0),
        module("Block_0", 12, 28, 0),
        module("Linear_0", 13, 17, 0),
        op("aten::linear", 14, 11, **{"Sequence number": 7, "Fwd thread id": 0}),
        op("aten::addmm", 15, 9, **{"Sequence number": 7, "Fwd thread id": 0, "External id": 1,
                                    "Input Dims": ADDMM_DIMS, "Input type": BF16}),
        launch(16, 1),
        kernel("gemm_k1", 31, 4, 1, **{"External id": 1}),
        module("Block_1", 42, 28, 1),
        module("Linear_1", 43, 17, 1),
        op("aten::addmm", 44, 10, **{"Sequence number": 8, "Fwd thread id": 0}),
        launch(45, 2, "cuLaunchKernel"),
        kernel("gemm_k2", 47, 6, 2),
        op("aten::add", 80, 5, **{"Sequence number": 9}),
        launch(81, 3, "cudaLaunchKernelExC"),
        kernel("add_k3", 86, 2, 3),
        op("aten::copy_", 110, 5),
        launch(111, 4, "cudaMemcpyAsync"),
        complete("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 113, 1, 7, pid=0, device=0,
                 stream=7, correlation=4, bytes=64),
    ]  # fmt: skip


def _backward(node_seq: int | None, with_flow: bool) -> list[dict]:
    first = {"Sequence number": node_seq, "Fwd thread id": 1} if node_seq is not None else {}
    events = [
        complete("user_annotation", "## backward ##", 120, 80),
        op("AddmmBackward0", 130, 10, AUTOGRAD, **first),
        launch(131, 5, tid=AUTOGRAD),
        kernel("gemm_k5", 133, 3, 5),
        op("AddmmBackward0", 150, 10, AUTOGRAD, **{"Sequence number": 8, "Fwd thread id": 1}),
        launch(151, 6, tid=AUTOGRAD),
        kernel("gemm_k6", 153, 5, 6),
    ]
    return events + ([flow("s", 1, 15, 100), flow("f", 1, 130, AUTOGRAD)] if with_flow else [])


@pytest.fixture
def model_trace(tmp_path) -> Path:
    return write_trace(tmp_path / "model.json", _forward() + _backward(None, with_flow=True))


def _ops(path: Path) -> pl.DataFrame:
    return analyse(load_profile(path)).ops.sort("op_id")


@pytest.mark.slow
def test_module_frames_give_path_class_direction_phase_by_hand(model_trace):
    ops = _ops(model_trace)
    got = ops.select("name", "module", "module_class", "direction", "phase", "step").rows()
    assert got == [
        ("gemm_k1", L0, "Linear", "forward", "forward", 3),
        ("gemm_k2", L1, "Linear", "forward", "forward", 3),
        ("add_k3", "Net_0", "Net", "forward", "forward", 3),
        ("Memcpy HtoD (Pageable -> Device)", None, None, None, None, 3),
        ("gemm_k5", L0, "Linear", "backward", "backward", 3),  # through the fwdbwd flow
        ("gemm_k6", L1, "Linear", "backward", "backward", 3),  # through Sequence number 8
    ]
    assert ops["launch_api"].to_list() == [
        "cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync",
        "cudaLaunchKernel", "cudaLaunchKernel",
    ]  # fmt: skip
    assert ops["aten_op"][0] == "aten::addmm" and ops["input_shapes"][0] == json.dumps(ADDMM_DIMS)


@pytest.mark.slow
def test_by_module_adds_up_by_hand(model_trace):
    analysis = analyse(load_profile(model_trace))
    by_module = analysis.summaries.by_module
    rows = {r["module"]: r for r in by_module.iter_rows(named=True)}
    # The blocks launch nothing themselves: rows with no time of their own.
    blocks = {"Net_0.Block_0": 0, "Net_0.Block_1": 0}
    own = {L0: 7000, L1: 11000, "Net_0": 2000, None: 1000, **blocks}
    assert {m: rows[m]["time_ns"] for m in rows} == own
    assert (rows[L0]["forward_ns"], rows[L0]["backward_ns"]) == (4000, 3000)
    assert (rows[L1]["forward_ns"], rows[L1]["backward_ns"]) == (6000, 5000)
    assert by_module["time_ns"].sum() == analysis.ops["dur_ns"].sum() == 21000
    # Inclusive: ops, time, forward and backward time of the module and all below it.
    inclusive = ["module_class", "ops", "inclusive_ops", "inclusive_ns"]
    inclusive += ["inclusive_forward_ns", "inclusive_backward_ns"]
    got = {m: tuple(rows[m][c] for c in inclusive) for m in rows}
    assert got["Net_0.Block_0"] == ("Block", 0, 2, 7000, 4000, 3000)  # k1 + k5
    assert got["Net_0.Block_1"] == ("Block", 0, 2, 11000, 6000, 5000)  # k2 + k6
    assert got["Net_0"] == ("Net", 1, 5, 20000, 12000, 8000)  # and add_k3
    assert got[L0][2:] == (2, 7000, 4000, 3000)
    assert got[None][1:] == (1, 1, 1000, 0, 0)  # outside every module: itself only


@pytest.mark.slow
@pytest.mark.parametrize(
    ("node_seq", "with_flow", "module"),
    [
        (8, True, L0),  # the flow decides over the node's own (wrong) sequence number
        (8, False, L1),  # without the flow, the sequence number links
        (7, False, L0),
        (None, False, None),  # neither: no module, the phase still comes from the main thread
    ],
)
def test_backward_link_by_flow_else_sequence_number(tmp_path, node_seq, with_flow, module):
    path = write_trace(tmp_path / "t.json", _forward() + _backward(node_seq, with_flow))
    k5 = _ops(path).filter(pl.col("name") == "gemm_k5").row(0, named=True)
    assert (k5["module"], k5["phase"]) == (module, "backward")
    assert k5["direction"] == ("backward" if module else None)


def test_reader_ranges_module_names_and_meta(model_trace):
    report = read_trace(model_trace)
    modules = report.ranges.filter(pl.col("kind") == "synthetic").sort("start_ns")
    assert modules["name"].to_list() == [
        "nn.Module: Net_0 (Net)",
        "nn.Module: Net_0.Block_0 (Block)",
        f"nn.Module: {L0} (Linear)",
        "nn.Module: Net_0.Block_1 (Block)",
        f"nn.Module: {L1} (Linear)",
    ]
    assert modules.select("start_ns", "end_ns").row(2) == (13000, 30000)
    # The names the reader writes are the names the attribution reads back.
    labels = name_labels(modules["name"], ["lbl_module", "lbl_module_class", "lbl_direction"])
    assert labels.row(2) == (L0, "Linear", "forward")
    nodes = report.ranges.filter(pl.col("tid") == AUTOGRAD)["name"].to_list()
    assert nodes == ["AddmmBackward0, stashed seq = 7", "AddmmBackward0, stashed seq = 8"]
    meta = dict(report.meta.rows())
    assert meta["module_source"] == "nn.Module frames" and meta["module_frames"] == "5"
    assert (meta["fwdbwd_flows"], meta["compute_dtype"]) == ("1", "bf16")


@pytest.mark.slow
def test_older_spelling_without_instance_number(tmp_path):
    events = [module("Linear", 0, 10, 0), op("aten::mm", 1, 5), launch(2, 1), kernel("k", 3, 1, 1)]
    events[0]["args"].pop("Python module id")
    ops = _ops(write_trace(tmp_path / "old.json", events))
    assert ops.select("module", "module_class").row(0) == ("Linear", "Linear")


@pytest.mark.slow
def test_nsysmap_module_ranges_win_over_module_frames(tmp_path):
    own = complete("user_annotation", "nsysmap:fwd:Linear:blocks.0.fc", 13, 17)
    path = write_trace(tmp_path / "own.json", [own, *_forward()])
    ops = _ops(path)
    assert ops.select("module").to_series().to_list()[:3] == ["blocks.0.fc", None, None]
    assert read_trace(path).meta_value("module_source") == "nsysmap ranges"


@pytest.mark.slow
def test_report_shows_module_time_shapes_and_flops(model_trace, tmp_path):
    analyse_file(model_trace, tmp_path / "out", options={"command": "attribute"})
    result = build_report(read_run(tmp_path / "out"))
    layers = {r["layer"]: r for r in result.tables["report_layers"].iter_rows(named=True)}
    # Linear_0 of Block_0 and Linear_1 of Block_1: one layer, instance numbers collapsed.
    linear = layers["Net_*.Block_*.Linear_*"]
    assert linear["modules"] == 2
    assert linear["matmul_flop"] == 2 * 8 * 16 * 32  # k1's addmm; the others' shapes unrecorded
    assert linear["time_ns"] == 7000 + 11000 and linear["mfu"] is not None
    # forward / backward: by call direction (k1 + k2, k5 + k6), as in by_module.
    assert (linear["forward_ns"], linear["backward_ns"]) == (4000 + 6000, 3000 + 5000)
    devices = result.tables["report_devices"].row(0, named=True)
    assert devices["dtype"] == "bf16" and devices["peak_tflops"] == pytest.approx(989.4)
    shapes = result.tables["report_shapes"]
    assert json.dumps(ADDMM_DIMS) in set(shapes["input_shapes"])
    assert "Net_*.Block_*.Linear_*" in result.markdown


# ------------------------------------------------------- recorded CPU trace


def _record(path: Path) -> None:
    """A 2-block model, 2 training steps, profiled the way people record module traces."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc, self.act = torch.nn.Linear(16, 16), torch.nn.ReLU()
            # p = 0: makes no autograd node, yet records the number the Linear's node takes
            self.drop = torch.nn.Dropout(0.0)

        def forward(self, x):
            return self.act(self.fc(self.drop(x)))

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList([Block(), Block()])
            self.head = torch.nn.Linear(16, 4)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    warnings.filterwarnings("ignore", "Profiler won't be using warmup")
    torch.manual_seed(0)
    model, x, y = Net(), torch.randn(8, 16), torch.randn(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        with_stack=True,
        with_modules=True,
        schedule=schedule(wait=0, warmup=0, active=2, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(2):
            opt.zero_grad()
            with record_function("## forward ##"):
                loss = ((model(x) - y) ** 2).mean()
            with record_function("## backward ##"):
                loss.backward()
            opt.step()
            prof.step()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("modules") / "trace.json"
    _record(path)
    return path


def _us(value) -> int:
    return int(Decimal(str(value)) * 1000)


def _walk(events: list[dict]) -> list[dict]:
    """CPU operators with the module frames and operators enclosing them (a stack walk)."""
    spans = [e for e in events if e.get("ph") == "X" and e["cat"] in ("cpu_op", "python_function")]
    spans.sort(key=lambda e: (e["tid"], _us(e["ts"]), -_us(e["dur"])))
    stack, ops = [], []
    for e in spans:
        start, end = _us(e["ts"]), _us(e["ts"]) + _us(e["dur"])
        while stack and (stack[-1]["tid"] != e["tid"] or stack[-1]["end"] <= start):
            stack.pop()
        row = {"tid": e["tid"], "start": start, "end": end, "name": e["name"], "args": e["args"]}
        if e["cat"] == "python_function":
            frame = e["name"].removeprefix("nn.Module: ")
            stack.append(row | {"frame": frame if frame != e["name"] else None})
            continue
        frames = [s["frame"] for s in stack if s.get("frame")]
        row |= {"module": ".".join(frames) or None, "outer": [s for s in stack if "ops" in s]}
        stack.append(row | {"ops": True})
        ops.append(stack[-1])
    return ops


def _expected_modules(path: Path) -> dict[tuple[int, int, str], str | None]:
    """(start, end, name) of each CPU operator -> module path, worked out from the JSON alone.

    Inside module frames: their path. Else, under a backward node (the
    innermost operator with a sequence number, itself or around it, recorded
    with "Fwd thread id" > 0 or ending a fwdbwd flow): the module of its
    forward operator (the flow's start, else the latest forward operator
    with that sequence number that started before the node: the one that
    made it; no module where that one is outside every module frame).
    """
    events = json.loads(path.read_text())["traceEvents"]
    ops = _walk(events)
    at = {(o["tid"], o["start"]): o for o in sorted(ops, key=lambda o: o["end"], reverse=True)}
    flows = {
        (e["ph"], e["id"]): (e["tid"], _us(e["ts"])) for e in events if e.get("cat") == "fwdbwd"
    }
    for (ph, flow_id), where in flows.items():
        if ph == "f" and ("s", flow_id) in flows:
            at[where]["source"] = at[flows[("s", flow_id)]]
    forward: dict[int, list[tuple[float, str | None]]] = {}
    for o in sorted(ops, key=lambda o: o["start"]):
        seq = o["args"].get("Sequence number")
        if seq is not None and not o["args"].get("Fwd thread id"):
            forward.setdefault(seq, []).append((o["start"], o["module"]))

    def made(seq: int, start: float) -> str | None:
        before = [module for at, module in forward.get(seq, []) if at <= start]
        return before[-1] if before else None

    out = {}
    for o in ops:
        module = o["module"]
        linked = [n for n in [*o["outer"], o] if "source" in n or "Sequence number" in n["args"]]
        node = linked[-1] if linked and module is None else None
        if node is not None and "source" in node:
            module = node["source"]["module"]
        elif node is not None and node["args"].get("Fwd thread id"):
            module = made(node["args"]["Sequence number"], node["start"])
        out[(o["start"], o["end"], o["name"])] = module
    return out


@pytest.mark.torch
@pytest.mark.slow
def test_recorded_cpu_trace_modules_match_a_stack_walk(recorded):
    expected = _expected_modules(recorded)
    ops = _ops(recorded)
    got = {(r["start_ns"], r["end_ns"], r["name"]): r["module"] for r in ops.iter_rows(named=True)}
    assert got.keys() == expected.keys()
    assert got == expected
    with_module = ops.filter(pl.col("module").is_not_null())
    # Net, Block: no own ops
    assert set(with_module["module_class"]) == {"Dropout", "Linear", "ReLU"}
    assert {"Net_0.Block_1.Linear_1", "Net_0.Linear_2"} <= set(with_module["module"])
    backward = with_module.filter(pl.col("direction") == "backward")
    assert backward.height > 0 and set(backward["phase"]) == {"backward"}
    assert set(with_module.filter(pl.col("direction") == "forward")["phase"]) == {"forward"}
    assert set(ops["step"].drop_nulls()) == {0, 1}


@pytest.mark.slow
def test_a_sequence_number_links_to_the_op_that_made_the_node(tmp_path):
    """A dropout that makes no autograd node (p = 0) records the number the next node will
    take, 8, as the addmm that makes node 8 does after it: backward node 8 belongs to the
    addmm's module, not the dropout's (the latest forward op with the number)."""
    dropout = [
        module("Dropout_0", 36, 4, 0),
        op("aten::dropout", 37, 2, **{"Sequence number": 8, "Fwd thread id": 0}),
    ]
    path = write_trace(tmp_path / "t.json", _forward() + dropout + _backward(8, False))
    k5 = _ops(path).filter(pl.col("name") == "gemm_k5").row(0, named=True)
    assert (k5["module"], k5["direction"]) == (L1, "backward")


@pytest.mark.slow
def test_a_node_made_outside_every_module_has_none(tmp_path):
    """Node 8 is made by an op outside every module (a loss after the model): an earlier
    op with its number in a module (a dropout making no node) lends it no module."""
    events = [op("aten::mse_loss", 101, 3, **{"Sequence number": 8, "Fwd thread id": 0})]
    path = write_trace(tmp_path / "t.json", _forward() + events + _backward(8, False))
    k5 = _ops(path).filter(pl.col("name") == "gemm_k5").row(0, named=True)
    assert k5["module"] is None


@pytest.mark.slow
def test_a_forward_op_after_the_node_is_not_its_maker(tmp_path):
    """An op numbered 8 that starts after backward node 8 (at 130) cannot have made it."""
    later = [
        module("Late_0", 170, 20, 0),
        op("aten::mul", 172, 2, **{"Sequence number": 8, "Fwd thread id": 0}),
    ]
    path = write_trace(tmp_path / "t.json", _forward() + _backward(8, False) + later)
    k5 = _ops(path).filter(pl.col("name") == "gemm_k5").row(0, named=True)
    assert k5["module"] == L1
