"""torch.profiler chrome traces -> normalised tables (nsysmap.read.torch.torch_trace).

Three kinds of input: a real CPU trace recorded here with torch, a small
hand-written CUDA trace in the Kineto format (no GPU on this machine), and
random nested operator sets for the self-time invariant. Expected values come
from the raw JSON read independently (Decimal arithmetic, a stack walk), or
are worked out by hand from the fixture.
"""

from __future__ import annotations

import gzip
import json
import warnings
from collections import Counter
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsysmap.core.errors import ExitCode, InputNotFound, NoGpuData, NotAProfile
from nsysmap.read.torch.torch_columns import ns_from_us, text_id
from nsysmap.read.torch.torch_trace import read_trace, self_times, short_kernel_name

# --------------------------------------------------------------- real trace


def _record_cpu_trace(path: Path, steps: int = 3) -> None:
    """Profile a 2-layer training loop with nsysmap-style annotations."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    class MarkBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            with record_function("nsysmap:bwd:Linear:0"):
                return grad * 1.0

    warnings.filterwarnings("ignore", "Profiler won't be using warmup")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters())
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        schedule=schedule(wait=0, warmup=0, active=steps, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for step in range(steps):
            with record_function(f"nsysmap:step:{step}"):
                with record_function("nsysmap:phase:forward"):
                    with record_function("nsysmap:fwd:Linear:0"):
                        out = MarkBackward.apply(model[0](x))
                    out = model[2](model[1](out))
                loss = ((out - y) ** 2).mean()
                opt.zero_grad()
                with record_function("nsysmap:phase:backward"):
                    loss.backward()
                with record_function("nsysmap:phase:optimizer"):
                    opt.step()
            prof.step()


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("torch") / "trace.json"
    _record_cpu_trace(path)
    return path


def _raw(path: Path, cat: str) -> list[dict]:
    doc = json.loads(path.read_text(), parse_float=Decimal)
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == cat]


def _ns(value) -> int:
    return int(Decimal(value) * 1000)


def _reference_self(events: list[dict]) -> tuple[dict[tuple, int], int]:
    """Self time per (tid, start, end, name) by a stack walk, and the top-level total."""
    ops = sorted(
        ((e["tid"], _ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), e["name"]) for e in events),
        key=lambda o: (o[0], o[1], -o[2]),
    )
    own: dict[int, int] = {}
    top_total, stack = 0, []
    for i, (tid, start, end, _) in enumerate(ops):
        while stack and (ops[stack[-1]][0] != tid or ops[stack[-1]][2] <= start):
            stack.pop()
        own[i] = end - start
        if stack:
            own[stack[-1]] -= end - start
        else:
            top_total += end - start
        stack.append(i)
    keys = Counter(ops)
    return {op: own[i] for i, op in enumerate(ops) if keys[op] == 1}, top_total


@pytest.mark.torch
@pytest.mark.slow
def test_cpu_trace_units_are_operators_timed_by_self_time(cpu_trace):
    raw_ops = _raw(cpu_trace, "cpu_op")
    report = read_trace(cpu_trace)
    ops = report.ops
    assert ops.height == len(raw_ops) > 100
    assert set(ops["kind"]) == {"cpu_op"} and set(ops["device_id"]) == {-1}
    expected, top_total = _reference_self(raw_ops)
    assert ops["dur_ns"].sum() == top_total
    got = {
        (r["stream_id"], r["start_ns"], r["end_ns"], r["name"]): r["dur_ns"]
        for r in ops.iter_rows(named=True)
    }
    checked = [key for key in expected if key in got]
    assert len(checked) > 0.9 * len(expected)
    assert all(got[key] == expected[key] for key in checked)
    linear = ops.filter(pl.col("name") == "aten::linear")
    assert (linear["dur_ns"] < linear["end_ns"] - linear["start_ns"]).all()  # addmm inside


@pytest.mark.torch
def test_cpu_trace_shapes_launches_and_meta(cpu_trace):
    raw_ops = _raw(cpu_trace, "cpu_op")
    report = read_trace(cpu_trace)
    want = Counter(
        (e["name"], None if "Input Dims" not in e["args"] else json.dumps(e["args"]["Input Dims"]))
        for e in raw_ops
    )
    got = report.ops.select("name", "input_shapes").rows()
    assert Counter(got) == want
    assert "[[8, 16], [32, 16], [32]]" in set(report.ops["input_shapes"])  # linear 16 -> 32
    launches = report.ops.join(report.api_calls, on=["pid", "correlation_id"])
    assert launches.height == report.ops.height == report.api_calls.height
    assert (launches["start_ns"] == launches["start_ns_right"]).all()
    assert (launches["stream_id"] == launches["tid"]).all()
    assert set(report.api_calls["api_name"]) == {"cpu_op"}
    assert report.meta_value("backend") == "torch.profiler"
    assert report.meta_value("unit_of_work") == "cpu_op"
    assert report.meta_value("source_path") == str(cpu_trace)


@pytest.mark.torch
def test_cpu_trace_ranges_are_user_annotations_and_autograd_nodes(cpu_trace):
    annotations = _raw(cpu_trace, "user_annotation")
    nodes = [e for e in _raw(cpu_trace, "cpu_op") if e["args"].get("Sequence number") is not None]
    ranges = read_trace(cpu_trace).ranges

    def node_name(e: dict) -> str:
        stashed = "stashed " if e["args"].get("Fwd thread id") else ""
        return f"{e['name']}, {stashed}seq = {e['args']['Sequence number']}"

    expected = Counter(e["name"] for e in annotations) + Counter(node_name(e) for e in nodes)
    assert Counter(ranges["name"]) == expected
    assert any(", stashed seq = " in n for n in expected)
    names = set(ranges["name"])
    assert {"nsysmap:step:2", "nsysmap:phase:backward", "nsysmap:bwd:Linear:0"} <= names
    assert any(n.startswith("ProfilerStep#") for n in names)
    assert any(n.startswith("Optimizer.step#AdamW") for n in names)
    assert set(ranges["kind"]) == {"push_pop"}
    assert ranges["depth"].null_count() == ranges["parent_id"].null_count() == ranges.height
    assert ranges["range_id"].n_unique() == ranges.height


@pytest.mark.torch
@pytest.mark.slow
def test_cpu_trace_attributes_through_the_pipeline(cpu_trace):
    pipeline = pytest.importorskip("nsysmap.flow.verbs")
    analysis = pipeline.analyse(pipeline.load_profile(cpu_trace))
    ops = analysis.ops
    assert ops.height == read_trace(cpu_trace).ops.height
    assert ops["dur_ns"].sum() == read_trace(cpu_trace).ops["dur_ns"].sum()
    fwd = ops.filter((pl.col("module") == "0") & (pl.col("direction") == "forward"))
    bwd = ops.filter((pl.col("module") == "0") & (pl.col("direction") == "backward"))
    assert "aten::addmm" in set(fwd["aten_op"])
    assert bwd.height > 0 and set(bwd["phase"]) == {"backward"}
    assert set(ops.filter(pl.col("step").is_not_null())["step"]) == {0, 1, 2}


# ------------------------------------------------------- hand-written CUDA


def _x(cat, name, pid, tid, ts, dur, **args) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


GEMM = "void at::native::(anonymous namespace)::gemm_kernel<float, 128>(float*, int)"
CUDA_TRACE = {
    "schemaVersion": 1,
    "deviceProperties": [
        {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85051572224,
         "computeMajor": 8, "computeMinor": 0, "numSms": 108},
        {"id": 1, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85031714816,
         "computeMajor": 9, "computeMinor": 0, "numSms": 132},
    ],
    "cupti_version": 24,
    "cuda_runtime_version": 12040,
    "displayTimeUnit": "ms",
    "traceEvents": [
        {"ph": "M", "name": "thread_name", "pid": 100, "tid": 100, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 100, "tid": 101, "args": {"name": "autograd"}},
        _x("user_annotation", "nsysmap:step:0", 100, 100, 10.0, 100.0),
        _x("user_annotation", "nsysmap:fwd:Linear:fc1", 100, 100, 11.0, 20.0),
        _x("cpu_op", "aten::addmm", 100, 100, 12.0, 10.0,
           **{"External id": 7, "Input Dims": [[32], [8, 16], [16, 32], [], []]}),
        _x("cuda_runtime", "cudaLaunchKernel", 100, 100, 13.0, 2.0,
           **{"External id": 7, "cbid": 211, "correlation": 501}),
        _x("kernel", GEMM, 0, 7, 20.5, 3.25,
           **{"External id": 7, "queued": 0, "device": 0, "context": 1, "stream": 7,
              "correlation": 501, "registers per thread": 32, "shared memory": 0,
              "blocks per SM": 0.5, "warps per SM": 4.0, "grid": [4, 1, 1],
              "block": [128, 1, 1], "est. achieved occupancy %": 25}),
        _x("gpu_user_annotation", "nsysmap:fwd:Linear:fc1", 0, 7, 20.499, 3.252),
        {"ph": "s", "id": 501, "pid": 100, "tid": 100, "ts": 13.0, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 501, "pid": 0, "tid": 7, "ts": 20.5, "cat": "ac2g", "name": "ac2g",
         "bp": "e"},
        _x("cpu_op", "aten::copy_", 100, 100, 40.0, 5.0,
           **{"External id": 8, "Input Dims": [[8, 16], [8, 16], []]}),
        _x("cuda_runtime", "cudaMemcpyAsync", 100, 100, 41.0, 1.0, correlation=502, cbid=41),
        _x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 0, 7, 45.0, 1.5,
           **{"device": 0, "context": 1, "stream": 7, "correlation": 502, "bytes": 512,
              "memory bandwidth (GB/s)": 0.34, "External id": 8}),
        _x("cuda_runtime", "cudaMemsetAsync", 100, 100, 50.0, 1.0, correlation=503),
        _x("gpu_memset", "Memset (Device)", 0, 7, 52.0, 0.5,
           device=0, stream=7, correlation=503, bytes=256),
        _x("user_annotation", "nsysmap:bwd:Linear:fc1", 100, 101, 60.0, 20.0),
        _x("cpu_op", "aten::mm", 100, 101, 61.0, 8.0,
           **{"External id": 9, "Input Dims": [[8, 32], [32, 16]]}),
        _x("cuda_driver", "cuLaunchKernel", 100, 101, 62.0, 1.0,
           **{"External id": 9, "correlation": 504}),
        _x("kernel", "ampere_sgemm_32x32_sliced1x4_nn", 1, 13, 70.0, 2.0,
           **{"External id": 9, "device": 1, "stream": 13, "correlation": 504,
              "grid": [2, 2, 1], "block": [64, 1, 1]}),
        _x("cuda_runtime", "cudaStreamSynchronize", 100, 100, 85.0, 3.0, correlation=505),
        _x("kernel", "orphan_kernel", 0, 7, 90.0, 1.0, device=0, stream=7, correlation=999),
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
         "tid": "PyTorch Profiler", "ts": 0.0, "dur": 200.0, "args": {"Op count": 0}},
    ],
}  # fmt: skip


@pytest.fixture
def cuda_trace(tmp_path) -> Path:
    path = tmp_path / "cuda.pt.trace.json"
    path.write_text(json.dumps(CUDA_TRACE))
    return path


def test_cuda_trace_gpu_ops_by_hand(cuda_trace):
    ops = read_trace(cuda_trace).ops
    cols = ["kind", "device_id", "stream_id", "pid", "correlation_id", "start_ns", "end_ns"]
    assert ops.select("op_id", *cols, "dur_ns").rows() == [
        (0, "kernel", 0, 7, 100, 501, 20500, 23750, 3250),
        (1, "memcpy", 0, 7, 100, 502, 45000, 46500, 1500),
        (2, "memset", 0, 7, 100, 503, 52000, 52500, 500),
        (3, "kernel", 1, 13, 100, 504, 70000, 72000, 2000),
        (4, "kernel", 0, 7, 100, 999, 90000, 91000, 1000),  # no launch: the host pid
    ]
    assert ops["short_name"].to_list() == [
        "gemm_kernel",
        "Memcpy HtoD",
        "Memset",
        "ampere_sgemm_32x32_sliced1x4_nn",
        "orphan_kernel",
    ]
    grid_block = ops.select(pl.col("^(grid|block)_.$")).rows()
    assert grid_block[0] == (4, 1, 1, 128, 1, 1) and grid_block[3] == (2, 2, 1, 64, 1, 1)
    assert grid_block[1] == (None,) * 6
    assert ops["bytes"].to_list() == [None, 512, 256, None, None]
    assert ops["input_shapes"].to_list() == [
        "[[32], [8, 16], [16, 32], [], []]",
        "[[8, 16], [8, 16], []]",
        None,
        "[[8, 32], [32, 16]]",
        None,
    ]


def test_cuda_trace_launches_ranges_devices_meta(cuda_trace):
    report = read_trace(cuda_trace)
    assert report.api_calls.select("tid", "correlation_id", "api_name").rows() == [
        (100, 501, "cudaLaunchKernel"),
        (100, 502, "cudaMemcpyAsync"),
        (100, 503, "cudaMemsetAsync"),
        (101, 504, "cuLaunchKernel"),
        (100, 505, "cudaStreamSynchronize"),
    ]
    assert report.api_calls["start_ns"].to_list() == [13000, 41000, 50000, 62000, 85000]
    # Annotations and CPU operators; not the GPU-side copy of an annotation.
    assert report.ranges.select("tid", "name", "start_ns", "end_ns").rows() == [
        (100, "nsysmap:step:0", 10000, 110000),
        (100, "nsysmap:fwd:Linear:fc1", 11000, 31000),
        (100, "aten::addmm", 12000, 22000),
        (100, "aten::copy_", 40000, 45000),
        (101, "nsysmap:bwd:Linear:fc1", 60000, 80000),
        (101, "aten::mm", 61000, 69000),
    ]
    assert report.devices.rows() == [
        (0, "NVIDIA A100-SXM4-80GB", 108, 85051572224, "8.0"),
        (1, "NVIDIA H100 80GB HBM3", 132, 85031714816, "9.0"),
    ]
    assert report.threads.rows() == [(100, 100, "python"), (100, 101, "autograd")]
    assert report.meta_value("unit_of_work") == "gpu_op"
    assert report.meta_value("cupti_version") == "24"
    assert report.meta_value("kineto_schema_version") == "1"


@pytest.mark.slow
def test_cuda_trace_attributes_through_the_pipeline(cuda_trace):
    pipeline = pytest.importorskip("nsysmap.flow.verbs")
    ops = pipeline.analyse(pipeline.load_profile(cuda_trace)).ops.sort("op_id")
    first, backward = ops.row(0, named=True), ops.row(3, named=True)
    assert (first["module"], first["direction"], first["aten_op"], first["step"]) == (
        "fc1",
        "forward",
        "aten::addmm",
        0,
    )
    assert (backward["module"], backward["direction"], backward["aten_op"]) == (
        "fc1",
        "backward",
        "aten::mm",
    )
    assert backward["step"] == 0  # from the main thread's step range, same process
    assert ops.row(4, named=True)["launch_api"] is None


# ------------------------------------------------------------ file handling


def test_gzipped_trace_reads_the_same(cuda_trace, tmp_path):
    packed = tmp_path / "cuda.json.gz"
    packed.write_bytes(gzip.compress(cuda_trace.read_bytes()))
    assert read_trace(packed).ops.equals(read_trace(cuda_trace).ops)


def test_bare_event_array_and_text_ids(tmp_path):
    events = [
        _x("cpu_op", "aten::add", "4242", "stream 7", 1.0, 2.0),
        _x("cpu_op", "aten::mul", "4242", "stream 7", 5.0, 1.0),
    ]
    path = tmp_path / "array.json"
    path.write_text(json.dumps(events))
    ops = read_trace(path).ops
    assert set(ops["pid"]) == {4242}
    assert set(ops["stream_id"]) == {text_id("stream 7")}
    assert text_id("stream 7") == text_id("stream 7") < -1
    assert text_id("Spans") != text_id("stream 7")
    assert ops["dur_ns"].to_list() == [2000, 1000]


@pytest.mark.parametrize(
    ("content", "error", "code"),
    [
        (b"\x00\x01 not json", NotAProfile, ExitCode.UNUSABLE_INPUT),
        (b'{"schemaVersion": 1}', NotAProfile, ExitCode.UNUSABLE_INPUT),
        (b'"just a string"', NotAProfile, ExitCode.UNUSABLE_INPUT),
        (gzip.compress(b"{ truncated", mtime=0), NotAProfile, ExitCode.UNUSABLE_INPUT),
        (b'{"traceEvents": []}', NoGpuData, ExitCode.NO_GPU_DATA),
        (b"[]", NoGpuData, ExitCode.NO_GPU_DATA),  # the array form, with no events
        # a JSON array of other records (a catalogue of files): not a trace
        (b'[{"file": "a.sqlite", "carries": ["nvtx"]}, 3]', NotAProfile, ExitCode.UNUSABLE_INPUT),
    ],
)
def test_bad_files_fail_with_one_line(tmp_path, content, error, code):
    path = tmp_path / "trace.json"
    path.write_bytes(content)
    with pytest.raises(error) as info:
        read_trace(path)
    assert info.value.exit_code == code
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_missing_file_is_input_not_found(tmp_path):
    with pytest.raises(InputNotFound):
        read_trace(tmp_path / "nope.json")


# ------------------------------------------------------------- invariants


@pytest.mark.slow
@given(st.lists(st.from_regex(r"[0-9]{1,13}(\.[0-9]{0,6})?", fullmatch=True), max_size=20))
def test_microsecond_text_converts_exactly(values):
    expected = [int((Decimal(v) * 1000).to_integral_value("ROUND_HALF_UP")) for v in values]
    assert ns_from_us(values).to_list() == expected


@st.composite
def nested_ops(draw) -> list[tuple[int, int, int, int, int | None]]:
    """(op_id, tid, start, end, parent) from a push/pop walk on two threads."""
    out: list[list] = []
    for tid in (1, 2):
        t, stack = 0, []
        for push, gap in draw(st.lists(st.tuples(st.booleans(), st.integers(0, 3)), max_size=30)):
            t += gap
            if push:
                out.append([len(out), tid, t, None, stack[-1] if stack else None])
                stack.append(out[-1][0])
            elif stack:
                out[stack.pop()][3] = t
        for op_id in reversed(stack):
            t += draw(st.integers(0, 3))
            out[op_id][3] = t
    return [tuple(row) for row in out]


@pytest.mark.slow  # a property test against the reference: seconds
@settings(max_examples=200, deadline=None)
@given(nested_ops())
def test_self_times_match_a_stack_walk_and_conserve_time(rows):
    frame = pl.DataFrame(
        [(i, 9, tid, s, e) for i, tid, s, e, _ in rows],
        schema={c: pl.Int64 for c in ("op_id", "pid", "tid", "start_ns", "end_ns")},
        orient="row",
    )
    own = {i: e - s for i, _, s, e, _ in rows}
    for _, _, s, e, parent in rows:
        if parent is not None:
            own[parent] -= e - s
    got = dict(self_times(frame).rows())
    assert got == own
    assert sum(got.values()) == sum(e - s for _, _, s, e, p in rows if p is None)


def test_short_kernel_names():
    names = pl.Series(
        [
            GEMM,
            "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4>(Params)",
            "Memset (Device)",
            "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16",
            "(weird)",
        ]
    )
    assert pl.select(short_kernel_name(pl.lit(names))).to_series().to_list() == [
        "gemm_kernel",
        "Kernel2",
        "Memset",
        "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16",
        "(weird)",
    ]
