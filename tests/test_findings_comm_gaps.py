"""One nanosecond, one claim: the compute stream's idle time under exposed communication.

Each step below (times in ms from the step's start) runs a GEMM on the compute
stream, then an all-reduce on stream 20 while the compute stream waits in a gap
the host spends in a synchronisation:

    compute  |== gemm 4 ==|      sync gap       |= gemm =|
    stream 20        |===== all-reduce, exposed =====|

host_sync claims the gap, exposed_communication the all-reduce; the part of the gap
under the exposed all-reduce is one time, and only one of them saves it.
"""

from __future__ import annotations

from types import SimpleNamespace

import polars as pl
import pytest

from nsysmap.findings import comm_gaps
from nsysmap.findings.comm_gaps import _pool
from nsysmap.findings.finding import Claim
from nsysmap.findings.inputs import Inputs
from nsysmap.flow.verbs import analyse, load_profile
from tests.findings_plans import V100, K, Plan, export, findings_of

MS = 1_000_000
SGEMM = "volta_sgemm_128x64_nn"
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def _savings(table: pl.DataFrame) -> dict[str, float]:
    rows = table.filter(pl.col("saving_ns_per_step").is_not_null())
    return {r["rule"]: r["saving_ns_per_step"] / MS for r in rows.iter_rows(named=True)}


@pytest.mark.slow
def test_a_sync_gap_over_the_whole_exposed_all_reduce_takes_it_once(tmp_path):
    """Gap [4, 8), all-reduce [4.5, 7.5) exposed: host_sync saves the 4 ms gap, and the
    3 ms of the all-reduce inside it are not saved a second time (before: 4 + 3)."""
    step = [
        K(SGEMM, 4.0, phase="backward"),
        K(ALL_REDUCE, 3.0, phase="backward", stream=20, at=4.5),
        K(SGEMM, 1.0, phase="backward", gap=4.0, sync=True),
    ]
    saved = _savings(findings_of(Plan(step, gpu=V100), tmp_path))
    assert saved["host_sync"] == pytest.approx(4.0)
    assert "exposed_communication" not in saved  # its 3 ms are inside host_sync's 4


@pytest.mark.slow
def test_the_larger_takes_the_shared_time_and_the_other_names_it(tmp_path):
    """Gap [4, 6), all-reduce [4.5, 9.5), the next GEMM [6, 7) hiding 1 ms of it: 4 ms
    exposed, 1.5 of them inside the gap. exposed_communication (4 ms) is served first;
    host_sync keeps the 0.5 ms of its gap before the all-reduce began, and names it."""
    step = [
        K(SGEMM, 4.0, phase="backward"),
        K(ALL_REDUCE, 5.0, phase="backward", stream=20, at=4.5),
        K(SGEMM, 1.0, phase="backward", gap=2.0, sync=True),
    ]
    table = findings_of(Plan(step, gpu=V100), tmp_path)
    saved = _savings(table)
    assert saved["exposed_communication"] == pytest.approx(4.0)
    assert saved["host_sync"] == pytest.approx(0.5)
    rows = {r["rule"]: r for r in table.iter_rows(named=True)}
    assert str(rows["exposed_communication"]["priority"]) in rows["host_sync"]["overlaps"]


@pytest.mark.slow
def test_an_all_reduce_beside_no_gap_keeps_its_whole_saving(tmp_path):
    """The all-reduce runs while the compute stream is idle after its last kernel: no
    gap of the step holds it, so nothing of it is shared."""
    step = [
        K(SGEMM, 4.0, phase="backward"),
        K(ALL_REDUCE, 3.0, phase="backward", stream=20, at=4.5),
    ]
    saved = _savings(findings_of(Plan(step, gpu=V100), tmp_path))
    assert saved["exposed_communication"] == pytest.approx(3.0)


def test_each_gap_falls_in_its_idle_pool():
    gaps = pl.DataFrame(
        {
            "kind": ["launch", "launch", "sync", "latency"],
            "dur_ns": [250_000, 250_001, 5, 7],
        }
    )
    got = gaps.select(pool=_pool(250_000))["pool"].to_list()
    assert got == ["idle_launch", "idle_long_launch", "idle_sync", "idle_latency"]


def test_a_partial_want_is_split_in_proportion(monkeypatch):
    """A chain wants 6 of a launch pool of 10 ms (phase null, module `m`), 4 ms of which lie
    under an exposed all-reduce: it claims 6 x 4/10 = 2.4 ms at the all-reduce's key
    (as exposed_communication keys it, capacity its exposed time) and the other 3.6 ms
    of the pool's 6 ms left."""
    parts = pl.DataFrame(
        {
            "device_id": [0],
            "phase": [None],
            "module": ["m"],
            "pool": ["idle_launch"],
            "comm_phase": ["backward"],
            "collective": ["all_reduce"],
            "ns": [4 * MS],
        },
        schema_overrides={"phase": pl.String},
    )
    monkeypatch.setattr(comm_gaps, "shared", lambda x: parts)
    capacity = {(0, "backward", "all_reduce"): 7 * MS}
    monkeypatch.setattr(comm_gaps, "_comm_capacity", lambda x: capacity)
    rows = pl.DataFrame(
        {"device_id": [0], "phase": [None], "module": ["m"], "want": [6 * MS], "have": [10 * MS]},
        schema_overrides={"phase": pl.String},
    )
    x = SimpleNamespace(rank=None)
    got = comm_gaps.idle_claims(x, rows, "idle_launch", "want", "have")  # type: ignore[arg-type]
    assert got == (
        Claim(("comm_exposed", None, 0, "backward", "all_reduce", "all_reduce"), 2_400_000, 7 * MS),
        Claim(("idle_launch", None, 0, None, "m"), 3_600_000, 6 * MS),
    )
    other = pl.DataFrame(  # another pool row (a phase of its own): none of those parts
        {"device_id": [0], "phase": ["forward"], "module": ["m"], "want": [MS], "have": [MS]}
    )
    assert comm_gaps.idle_claims(x, other, "idle_launch", "want", "have") == (  # type: ignore[arg-type]
        Claim(("idle_launch", None, 0, "forward", "m"), MS, MS),
    )


ALL_GATHER = "ncclDevKernel_AllGather_RING_LL"


def _sync_pool_under_communication(tmp_path, step: list[K]) -> float:
    """ms of the sync gaps' pool that lie under exposed communication, per step."""
    plan = Plan(step, gpu=V100)
    analysis = analyse(load_profile(export(plan, tmp_path / "run.sqlite")))
    waits = analysis.summaries.waits
    x = Inputs(analysis.store.scan(), waits["launch_cost"], waits["idle"], analysis.profile.devices)
    shared = comm_gaps.shared(x).filter(pl.col("pool") == "idle_sync")
    return shared["ns"].sum() / MS / plan.steps


@pytest.mark.slow
def test_two_exposed_kernels_over_one_gap_count_its_time_once(tmp_path):
    """Gap [4, 8); an all-reduce (stream 20) and an all-gather (stream 21) both over
    [4.5, 7.5); a GEMM on stream 8 over [4.5, 6) hides the first 1.5 ms of both. Each is
    exposed for 1.5 ms, and so is the gap under them together: 1.5 ms, not their sum
    (3 ms, which the gap's 4 ms did not cap)."""
    step = [
        K(SGEMM, 4.0, phase="backward"),
        K(ALL_REDUCE, 3.0, phase="backward", stream=20, at=4.5),
        K(ALL_GATHER, 3.0, phase="backward", stream=21, at=4.5),
        K(SGEMM, 1.5, phase="backward", stream=8, at=4.5),
        K(SGEMM, 1.0, phase="backward", gap=4.0, sync=True),
    ]
    assert _sync_pool_under_communication(tmp_path, step) == pytest.approx(1.5)


@pytest.mark.slow
def test_one_exposed_kernel_in_a_gap_keeps_its_exposed_time(tmp_path):
    """The same without the all-gather: the all-reduce's 1.5 exposed ms, as before."""
    step = [
        K(SGEMM, 4.0, phase="backward"),
        K(ALL_REDUCE, 3.0, phase="backward", stream=20, at=4.5),
        K(SGEMM, 1.5, phase="backward", stream=8, at=4.5),
        K(SGEMM, 1.0, phase="backward", gap=4.0, sync=True),
    ]
    assert _sync_pool_under_communication(tmp_path, step) == pytest.approx(1.5)


def _pieces(rows: list[tuple[int, int, int, int]], pid: list[int] | None = None) -> pl.DataFrame:
    """Pieces of gap 0 (device 0): (stream, start, end, exposed ns) each."""
    frame = pl.DataFrame(rows, schema=["stream_id", "start_ns", "end_ns", "ns"], orient="row")
    return frame.with_columns(gap=pl.lit(0, pl.UInt32), device_id=pl.lit(0, pl.Int64)).with_columns(
        pid=pl.Series(pid or [1] * len(rows), dtype=pl.Int64)
    )


def _compute(rows: list[tuple[int, int, int]]) -> pl.DataFrame:
    frame = pl.DataFrame(rows, schema=["stream_id", "start_ns", "end_ns"], orient="row")
    return frame.with_columns(device_id=pl.lit(0, pl.Int64), pid=pl.lit(1, pl.Int64))


def test_compute_on_a_communication_stream_hides_another_streams_kernel():
    """All-reduce on stream 20 over [0, 30), all-gather on 21 over [20, 50), compute on
    stream 20 over [30, 50) (after its all-reduce): exposed under them together, 30."""
    pieces = _pieces([(20, 0, 30, 30), (21, 20, 50, 10)])
    compute = _compute([(20, 30, 50)])
    got = comm_gaps._exposed_under(pieces, compute, ["device_id", "pid"])
    assert got.to_dicts() == [{"gap": 0, "cap_ns": 30}]


def test_long_gaps_are_scaled_without_overflow():
    """Two 4 s kernels over one 4 s gap: 8 s of pieces scaled to the gap's 4 s, not wrapped
    negative (4e9 x 4e9 is above 2^63)."""
    four = 4_000_000_000
    got = pl.select(comm_gaps.scaled(pl.lit(four), pl.lit(four), pl.lit(2 * four))).item()
    assert got == four // 2
