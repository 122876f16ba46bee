"""Where the GPU waits: planted gaps of every kind found with their cause and next kernel.

The export below (times in ms) has, on device 0, compute on stream 7 launched
from thread 70 and a side stream 8 launched from thread 71:

    step 0 (window [2, 45)):
      stream 7  K0 [2,5)  K1 [5.2,8)  K2 [11,13) K3 [13,15)  K4 [18,20)  K5 [31,33)
                 latency [5,5.2): K1 launched at 2, before K0 ended, nothing else ran
                 launch  [8,11):  K2 launched at 10, after K1 ended at 8
                 sync    [15,18): cudaStreamSynchronize [12.2,15.1] before K4's launch at 17
                 other_stream [20,31): K5 launched at 18.5, S0 ran on stream 8 [20,30)
                 after_last [33,45)
      stream 8  S0 [20,30)  S1 [40,45)
                 before_first [2,20); launch [30,40): S1 launched at 39 (late wins over K5
                 running on stream 7 meanwhile)
    step 1 (window [61.5, 70)):
      stream 7  K6 [61.5,65)  K7 [67,70)
                 sync [65,67): an `aten::_local_scalar_dense` range [62,66] (.item())
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from devtools.synth import SynthExport
from nsysmap.flow.verbs import analyse, load_profile
from nsysmap.waits.tables import waits_tables
from nsysmap.waits.text import stream_work, waits_line
from tests.cli_runner import nsysmap_cli
from tests.corpus import REAL, REAL2, corpus_path, needs_corpus

MS = 1_000_000
PID, MAIN, SIDE = 7, 70, 71
MODULES = {"a": (0.5, 2.5), "b": (9.5, 12.5), "c": (16.5, 17.5), "d": (18.4, 18.8)}
# (stream, launching thread, launch at, runs from, runs to)
KERNELS = {
    "K0": (7, MAIN, 1, 2, 5),
    "K1": (7, MAIN, 2, 5.2, 8),
    "K2": (7, MAIN, 10, 11, 13),
    "K3": (7, MAIN, 12, 13, 15),
    "K4": (7, MAIN, 17, 18, 20),
    "K5": (7, MAIN, 18.5, 31, 33),
    "S0": (8, SIDE, 19, 20, 30),
    "S1": (8, SIDE, 39, 40, 45),
    "K6": (7, MAIN, 61, 61.5, 65),
    "K7": (7, MAIN, 66.5, 67, 70),
}
# (step, stream, start, end, kind, next kernel, its module)
PLANTED = [
    (0, 7, 5, 5.2, "latency", "K1", "a"),
    (0, 7, 8, 11, "launch", "K2", "b"),
    (0, 7, 15, 18, "sync", "K4", "c"),
    (0, 7, 20, 31, "other_stream", "K5", "d"),
    (0, 7, 33, 45, "after_last", None, None),
    (0, 8, 2, 20, "before_first", "S0", None),
    (0, 8, 30, 40, "launch", "S1", None),
    (1, 7, 65, 67, "sync", "K7", None),
]


def planted_export() -> SynthExport:
    b = SynthExport()
    for tid in (MAIN, SIDE):
        b.range(PID, tid, 0, 60, "nsysmap:step:0")
        b.range(PID, tid, 60, 100, "nsysmap:step:1")
    b.range(PID, MAIN, 0.2, 59, "nsysmap:phase:forward")
    for path, (start, end) in MODULES.items():
        b.range(PID, MAIN, start, end, f"nsysmap:fwd:Linear:{path}")
    b.range(PID, MAIN, 62, 66, "aten::_local_scalar_dense, seq = 3")
    b.launch(PID, MAIN, 12.2, 15.1, 900, api="cudaStreamSynchronize_v3020")
    for corr, (name, (stream, tid, at, start, end)) in enumerate(KERNELS.items(), start=1):
        b.launch(PID, tid, at, at + 0.1, corr)
        b.kernel(PID, 0, stream, start, end, corr, name=name)
    return b


def attributed_planted(root: Path) -> Path:
    """`planted_export` written into `root` and attributed: the output directory."""
    path = planted_export().write(root / "planted.sqlite")
    assert nsysmap_cli(["attribute", path, "-o", root / "out", "--quiet"]) == 0
    return root / "out"


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    return attributed_planted(tmp_path_factory.mktemp("waits"))


def _ns(ms: float) -> int:
    return round(ms * MS)


@pytest.mark.slow
def test_every_planted_gap_is_found_with_its_kind_and_next_kernel(out):
    idle = pl.read_parquet(out / "idle.parquet")
    ops = pl.read_parquet(out / "ops.parquet").select("op_id", "name")
    got = idle.join(ops, left_on="next_op_id", right_on="op_id", how="left")
    rows = got.select(
        "step", "stream_id", "start_ns", "end_ns", pl.col("kind").cast(pl.String), "name", "module"
    ).sort("step", "stream_id", "start_ns")
    expected = [
        (step, stream, _ns(s), _ns(e), kind, nxt, mod)
        for step, stream, s, e, kind, nxt, mod in PLANTED
    ]
    assert rows.rows() == expected
    assert (idle["dur_ns"] == idle["end_ns"] - idle["start_ns"]).all()
    assert set(idle.filter(pl.col("step") == 0)["phase"].drop_nulls()) == {"forward"}


@pytest.mark.slow
def test_busy_and_idle_make_the_wall_time_of_every_stream_and_step(out):
    table = pl.read_parquet(out / "stream_idle.parquet").sort("step", "stream_id")
    assert (table["busy_ns"] + table["idle_ns"] == table["wall_ns"]).all()
    busy = {  # the kernels' durations by hand: no two overlap on one stream
        (0, 7): 3 + 2.8 + 2 + 2 + 2 + 2,
        (0, 8): 10 + 5,
        (1, 7): 3.5 + 3,
    }
    got = {(r["step"], r["stream_id"]): r["busy_ns"] for r in table.iter_rows(named=True)}
    assert got == {key: _ns(ms) for key, ms in busy.items()}
    assert table["wall_ns"].to_list() == [_ns(43), _ns(43), _ns(8.5)]
    by_kind = table.filter(pl.col("step") == 0, pl.col("stream_id") == 7).row(0, named=True)
    assert by_kind["idle_other_stream_ns"] == _ns(11) and by_kind["idle_sync_ns"] == _ns(3)


def test_launch_cost_per_module(out):
    cost = pl.read_parquet(out / "launch_cost.parquet")
    b = cost.filter(pl.col("module") == "b").row(0, named=True)
    # K2 and K3, each launch call 0.1 ms; the 3 ms before K2 were launch-bound
    assert (b["ops"], b["launches"], b["launch_cpu_ns"]) == (2, 2, _ns(0.2))
    assert b["busy_ns"] == _ns(4) and b["idle_launch_ns"] == b["idle_before_ns"] == _ns(3)
    assert b["launch_bound_share"] == pytest.approx(3 / 7)
    assert (
        cost["idle_before_ns"].sum() + _ns(12)
        == pl.read_parquet(out / "idle.parquet")["dur_ns"].sum()
    )  # every gap but after_last [33, 45) has its operation


@pytest.mark.slow
def test_short_kernels_are_counted_against_their_launch_call(tmp_path):
    b = SynthExport()
    b.range(PID, MAIN, 0, 10, "nsysmap:step:0")
    b.launch(PID, MAIN, 1, 1.5, 1)
    b.kernel(PID, 0, 7, 2, 2.1, 1, name="tiny")  # 0.1 ms kernel, 0.5 ms launch call
    b.launch(PID, MAIN, 2, 2.1, 2)
    b.kernel(PID, 0, 7, 3, 5, 2, name="big")  # 2 ms kernel, 0.1 ms launch call
    cost = _waits_of(b.write(tmp_path / "short.sqlite"))["launch_cost"].row(0, named=True)
    assert (cost["ops"], cost["shorter_than_launch"]) == (2, 1)
    assert cost["launch_cpu_ns"] == _ns(0.6)


@pytest.mark.slow
def test_a_long_gap_launched_in_time_with_nothing_running_is_unknown(tmp_path):
    """hta_recsys (a TorchRec pipeline's graph replays): gaps of up to 64 ms whose kernel was
    launched long before, with nothing else running, read as "GPU latency 30.6 %". The
    GPU's latency is microseconds: up to 0.25 ms a gap is latency, beyond it unknown."""
    b = SynthExport()
    b.range(PID, MAIN, 0, 20, "nsysmap:step:0")
    for corr, (at, start, end) in enumerate([(0.5, 1, 2), (0.6, 2.2, 3), (0.7, 8, 9)], 1):
        b.launch(PID, MAIN, at, at + 0.05, corr)
        b.kernel(PID, 0, 7, start, end, corr, name=f"k{corr}")
    idle = _waits_of(b.write(tmp_path / "long.sqlite"))["idle"].sort("start_ns")
    kinds = idle.filter(pl.col("kind").is_in(["latency", "unknown"]))
    assert kinds.select("start_ns", "end_ns", pl.col("kind").cast(pl.String)).rows() == [
        (_ns(2), _ns(2.2), "latency"),
        (_ns(3), _ns(8), "unknown"),
    ]


def _waits_of(path: Path) -> dict[str, pl.DataFrame]:
    profile = load_profile(path)
    ops = analyse(profile, infer=False).ops
    return waits_tables(ops, profile.api_calls, profile.ranges)


REAL_FILES = [
    REAL / "cs336a2_small_fwd_emitnvtx_shapes_a100.sqlite",
    REAL / "cs336a2_small_fwdbwd_emitnvtx_shapes_a100.sqlite",
    REAL / "cs336a2_fwd_no_nvtx_a100.sqlite",
    REAL / "hta_ddp_ns_resolution_rank0_v100.json.gz",
    REAL2 / "param_dlrm_ddp_rank0of8_nccl_alltoall_v100.pt.trace.json",
]


@pytest.mark.corpus
@needs_corpus
@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: p.name)
def test_real_profiles_add_up_per_stream_and_step(path):
    if not path.is_file():
        pytest.skip(f"{path} is not in the corpus")
    waits = _waits_of(path)
    table = waits["stream_idle"]
    assert table.height > 0
    assert (table["busy_ns"] + table["idle_ns"] == table["wall_ns"]).all()
    per_group = waits["idle"].group_by("device_id", "stream_id", "step").agg(pl.col("dur_ns").sum())
    joined = table.join(per_group, on=["device_id", "stream_id", "step"], nulls_equal=True)
    assert (joined["idle_ns"] == joined["dur_ns"]).all()


@pytest.mark.corpus
@needs_corpus
def test_the_course_forward_pass_is_launch_bound():
    """The course assignment's forward pass (A100, a small Transformer LM): the GPU waits
    mostly for launches, in the forward phase (measured: 12.7 of 13.5 ms idle)."""
    path = REAL / "cs336a2_small_fwd_emitnvtx_shapes_a100.sqlite"
    if not path.is_file():
        pytest.skip(f"{path} is not in the corpus")
    waits = _waits_of(path)
    row = waits["stream_idle"].row(0, named=True)
    assert row["idle_launch_ns"] > 0.8 * row["idle_ns"]
    cost = waits["launch_cost"]
    assert cost["launches"].sum() == cost["ops"].sum()  # every kernel has its launch call
    assert 0 < cost["shorter_than_launch"].sum() < cost["ops"].sum()


@pytest.mark.corpus
@needs_corpus
def test_a_kernel_then_synchronise_loop_waits_on_synchronisations():
    """Cloverleaf calls cudaDeviceSynchronize after every kernel: most idle time is sync."""
    waits = _waits_of(corpus_path("pipit_cloverleaf_cuda_perlmutter.sqlite"))
    row = waits["stream_idle"].row(0, named=True)
    assert row["busy_ns"] + row["idle_ns"] == row["wall_ns"]
    assert row["idle_sync_ns"] > 0.7 * row["idle_ns"]


def _trace_event(cat: str, name: str, ts: float, dur: float, **args: int) -> dict:
    tid = 7 if cat == "kernel" else 1
    event = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}
    return {**event, "args": args} if args else event


@pytest.mark.slow
def test_a_torch_profiler_trace_item_call_is_a_sync_wait(tmp_path):
    """ProfilerStep#0 (µs): a kernel [2000, 17000); `.item()` [20000, 30000); the next
    launch at 31000 and its kernel [32000, 33000): the gap [17000, 32000) is sync."""
    events = [
        _trace_event("user_annotation", "ProfilerStep#0", 0, 40000),
        _trace_event("cuda_runtime", "cudaLaunchKernel", 1000, 10, correlation=1),
        _trace_event("kernel", "gemm", 2000, 15000, device=0, stream=7, correlation=1),
        _trace_event("cpu_op", "aten::_local_scalar_dense", 20000, 10000),
        _trace_event("cuda_runtime", "cudaLaunchKernel", 31000, 10, correlation=2),
        _trace_event("kernel", "add", 32000, 1000, device=0, stream=7, correlation=2),
    ]
    path = tmp_path / "item.json"
    path.write_text(json.dumps({"traceEvents": events}))
    idle = _waits_of(path)["idle"]
    assert idle.select("step", "start_ns", "end_ns", pl.col("kind").cast(pl.String)).rows() == [
        (0, 17_000_000, 32_000_000, "sync")
    ]


DATA_TRACE = Path(__file__).parent / "data" / "cuda" / "gpt2_tiny_nsysmap_run_h100.json.gz"


@pytest.mark.slow
def test_a_real_torch_profiler_trace_adds_up_and_names_phases():
    waits = _waits_of(DATA_TRACE)
    table = waits["stream_idle"]
    assert (table["busy_ns"] + table["idle_ns"] == table["wall_ns"]).all()
    stepped = waits["idle"].filter(pl.col("step").is_not_null(), pl.col("kind") != "after_last")
    assert stepped["phase"].drop_nulls().n_unique() >= 3  # forward, backward, optimizer, ...


def test_the_terminal_line_names_the_busiest_stream_and_its_waits(out):
    line = waits_line(pl.read_parquet(out / "stream_idle.parquet"))
    wall = 43 + 8.5  # the two step windows, ms
    shares = {"busy": 20.3, "launch-bound": 3, "synchronisations": 5, "other streams": 11}
    assert line.startswith("Where the GPU waits (in steps, busiest stream; shares of the steps'")
    assert "device 0 stream 7 busy" in line
    for name, ms in shares.items():
        assert f"{name} {100 * ms / wall:.1f}%" in line
    assert waits_line(pl.read_parquet(out / "stream_idle.parquet").clear()) == ""


def test_the_terminal_line_says_every_idle_kind_with_time_so_its_shares_add_up(out):
    """Stream 7 sat idle 12 ms after its last kernel of step 0 (the side stream still ran):
    the line says so, and busy and idle add up to its wall time; a kind without time
    beyond the four causes (unknown, before the first operation) is not listed."""
    line = waits_line(pl.read_parquet(out / "stream_idle.parquet"))
    wall = 43 + 8.5
    assert f"after its last {100 * 12 / wall:.1f}%" in line
    assert "before its first" not in line and "unknown" not in line
    body = line.split("busy ", 1)[1]
    shares = [float(x) for x in re.findall(r"(\d+\.\d)%", body)]
    assert sum(shares) == pytest.approx(100, abs=0.3)


def test_the_terminal_line_leaves_out_a_sliver_of_a_rarer_kind(out):
    """fastvideo: 0.028 ms of unknown idle time in 300 ms read 'unknown 0.0%'; a kind beyond
    the four causes is listed once it shows as 0.1 % or more."""
    table = pl.read_parquet(out / "stream_idle.parquet")
    seven = pl.col("stream_id") == 7
    sliver = table.with_columns(idle_unknown_ns=pl.when(seven).then(1).otherwise(0))
    assert "unknown" not in waits_line(sliver)
    some = table.with_columns(idle_unknown_ns=pl.when(seven).then(MS).otherwise(0))
    assert f"unknown {100 * 2 / (43 + 8.5):.1f}%" in waits_line(some)  # 1 ms in each step


def test_the_busiest_stream_is_the_one_with_most_work_other_than_communication(out):
    """dlrm: the NCCL stream was busier than the compute stream, and the line named it
    while the findings' busiest stream (nsysmap.findings.inputs) was the compute one.
    Stream 7 is the busiest here; where stream 8 has more work other than communication,
    stream 8 (a NCCL stream that also ran a copy has only the copy's)."""
    table = pl.read_parquet(out / "stream_idle.parquet")
    work = pl.DataFrame({"device_id": [0, 0], "stream_id": [7, 8], "work_ns": [1, 5]})
    assert "device 0 stream 8 busy" in waits_line(table, work=work)
    assert "device 0 stream 7 busy" in waits_line(table)
    comm_only = work.with_columns(work_ns=pl.lit(0, pl.Int64))  # nothing but NCCL: by time
    assert "device 0 stream 7 busy" in waits_line(table, work=comm_only)


def test_each_streams_work_other_than_communication():
    ops = pl.LazyFrame(
        {
            "device_id": [0, 0, 0, 0, 1],
            "stream_id": [7, 20, 20, 20, 20],
            "category": ["gemm", "communication", "memcpy", "communication", None],
            "dur_ns": [10, 30, 1, 30, 4],
        }
    )
    got = stream_work(ops).sort("device_id", "stream_id").rows()
    assert got == [(0, 7, 10), (0, 20, 1), (1, 20, 4)]
