"""The waits tables against a plain loop over each stream's operations, on random inputs.

The reference walks each (device, stream, step) group's operations in order,
one at a time, following docs/waits.md: a gap opens where an operation starts
after everything before it on the stream has ended; its kind is read from the
next operation's launch time, the synchronisations of its process and the
other operations of the device. A synchronisation counts on the next
operation's launching thread only.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsysmap.core.schemas import API_CALLS, RANGES
from nsysmap.core.wait_schemas import LATENCY_MAX_NS
from nsysmap.waits.tables import waits_tables

SYNC = "cudaDeviceSynchronize_v3020"


@dataclass(frozen=True)
class Op:
    op_id: int
    stream: int
    step: int | None
    pid: int
    tid: int
    start: int
    end: int
    launch: int | None


def reference(ops: list[Op], syncs: list[tuple[int, int, int, int]]) -> tuple[set, dict]:
    """(the gaps as (stream, step, start, end, kind, next op), busy time per (stream, step));
    `syncs` are (pid, tid, start, end)."""
    windows: dict = {}
    for o in ops:
        lo, hi = windows.get(o.step, (o.start, o.end))
        windows[o.step] = (min(lo, o.start), max(hi, o.end))
    groups: dict = {}
    for o in sorted(ops, key=lambda o: (o.start, o.end, o.op_id)):
        groups.setdefault((o.stream, o.step), []).append(o)
    gaps, busy = set(), {}
    for (stream, step), mine in groups.items():
        w0, w1 = windows[step]
        reach, covered = None, 0
        for o in mine:
            if reach is not None and o.start > reach:
                gaps.add((stream, step, reach, o.start, _kind(o, reach, ops, syncs), o.op_id))
            base = o.start if reach is None else max(o.start, reach)
            covered += max(0, o.end - base)
            reach = o.end if reach is None else max(reach, o.end)
        if mine[0].start > w0:
            gaps.add((stream, step, w0, mine[0].start, "before_first", mine[0].op_id))
        if reach < w1:
            gaps.add((stream, step, reach, w1, "after_last", None))
        busy[(stream, step)] = covered
    return gaps, busy


def _kind(o: Op, g0: int, ops: list[Op], syncs: list[tuple[int, int, int, int]]) -> str:
    g1 = o.start
    late = o.launch is not None and o.launch > g0
    until = g1 if o.launch is None else min(g1, o.launch)
    blocked = any((pid, tid) == (o.pid, o.tid) and s < until and e > g0 for pid, tid, s, e in syncs)
    other = any(x.start < g1 and x.end > g0 for x in ops)
    if (late or o.launch is None) and blocked:
        return "sync"
    if late:
        return "launch"
    if other:
        return "other_stream"
    return "unknown" if o.launch is None or g1 - g0 > LATENCY_MAX_NS else "latency"


op = st.tuples(
    st.sampled_from([1, 2]),  # stream
    st.sampled_from([0, 1, None]),  # step
    st.sampled_from([10, 11]),  # pid
    st.sampled_from([1, 2]),  # launching thread
    st.integers(0, 60),  # start
    st.integers(0, 12),  # duration
    st.one_of(st.none(), st.integers(-15, 5)),  # launch, relative to the start
)
sync = st.tuples(
    st.sampled_from([10, 11]), st.sampled_from([1, 2]), st.integers(0, 70), st.integers(0, 15)
)


def _frames(ops: list[Op], syncs: list[tuple[int, int, int, int]]) -> tuple[pl.DataFrame, ...]:
    frame = pl.DataFrame(
        {
            "op_id": [o.op_id for o in ops],
            "kind": ["kernel"] * len(ops),
            "device_id": [0] * len(ops),
            "stream_id": [o.stream for o in ops],
            "step": [o.step for o in ops],
            "pid": [o.pid for o in ops],
            "tid": [o.tid for o in ops],
            "correlation_id": [o.op_id for o in ops],
            "start_ns": [o.start for o in ops],
            "end_ns": [o.end for o in ops],
            "launch_start_ns": [o.launch for o in ops],
            "range_path": [None] * len(ops),
            "phase": [None] * len(ops),
            "module": [None] * len(ops),
        },
        schema_overrides={"step": pl.Int64, "launch_start_ns": pl.Int64, "range_path": pl.String,
                          "phase": pl.String, "module": pl.String},
    )  # fmt: skip
    calls = pl.DataFrame(
        {
            "pid": [p for p, _, _, _ in syncs],
            "tid": [t for _, t, _, _ in syncs],
            "correlation_id": [10_000 + i for i in range(len(syncs))],
            "api_name": [SYNC] * len(syncs),
            "start_ns": [s for _, _, s, _ in syncs],
            "end_ns": [e for _, _, _, e in syncs],
        },
        schema=API_CALLS,
    )
    ranges = pl.DataFrame(schema=RANGES)
    return frame, calls, ranges


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(op, min_size=1, max_size=14), st.lists(sync, max_size=4))
def test_gaps_kinds_and_busy_time_match_the_reference(rows, sync_rows):
    ops = [
        Op(i, stream, step, pid, tid, start, start + dur, None if at is None else start + at)
        for i, (stream, step, pid, tid, start, dur, at) in enumerate(rows)
    ]
    syncs = [(pid, tid, s, s + d) for pid, tid, s, d in sync_rows]
    waits = waits_tables(*_frames(ops, syncs))
    gaps, busy = reference(ops, syncs)
    idle = waits["idle"].select(
        "stream_id", "step", "start_ns", "end_ns", pl.col("kind").cast(pl.String), "next_op_id"
    )
    assert set(idle.rows()) == gaps and idle.height == len(gaps)
    table = waits["stream_idle"]
    assert {(r["stream_id"], r["step"]): r["busy_ns"] for r in table.iter_rows(named=True)} == busy
    assert (table["busy_ns"] + table["idle_ns"] == table["wall_ns"]).all()
