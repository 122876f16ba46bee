"""The reader's fast paths decide exactly as its one-by-one checks (torch_events)."""

from __future__ import annotations

import gc
import itertools
from decimal import Decimal

from nsysmap.read.torch.torch_columns import (
    MAX_DIMS_DEPTH,
    axis_columns,
    dims_column,
    dims_text,
    ids,
    int_series,
    ns_from_us,
)
from nsysmap.read.torch.torch_events import (
    Number,
    Skipped,
    _complete_ok,
    _fast_flow_ok,
    _fast_ok,
    _flow_ok,
    int_ok,
    paused_gc,
    split_events,
)

TIMES = [Number("1.5"), Number("-2.25"), Number("-0.0"), Number("1e400"), Number("9e15"),
         3, -3, 0, 2**70, True, "1.5", "abc", None, 1.5, [1]]  # fmt: skip
IDS = [7, None, "7", 0, False]
ARGS = [None, {}, {"a": 1}, [1], "x", 3]


def _events():
    for ts, dur, pid, tid, args in itertools.product(TIMES, TIMES, IDS, IDS[:2], ARGS):
        ev = {"ph": "X", "cat": "kernel", "name": "k", "ts": ts, "dur": dur, "pid": pid, "tid": tid}
        yield ev if args == 3 else {**ev, "args": args}


def test_the_fast_check_passes_only_events_the_full_check_passes_without_counting():
    passed = 0
    for ev in _events():
        skipped = Skipped()
        slow = _complete_ok(ev, skipped)
        if _fast_ok(ev):
            passed += 1
            assert slow and skipped.total == 0 and skipped.args_ignored == 0, ev
    assert passed > 100  # the usual events do take the fast path


def test_the_fast_flow_check_agrees_with_the_full_one():
    passed = 0
    for ts, flow_id, pid in itertools.product(TIMES, [1, -1, 2**63, -(2**63), True, "1"], IDS):
        ev = {"ph": "s", "cat": "ac2g", "id": flow_id, "ts": ts, "pid": pid, "tid": 1}
        skipped = Skipped()
        slow = _flow_ok(ev, skipped)
        if _fast_flow_ok(ev):
            passed += 1
            assert slow and skipped.total == 0, ev
    assert passed > 10


def test_split_counts_the_same_skips_as_event_by_event_checks():
    events = list(_events())
    buckets, _, skipped = split_events(events)
    expected = Skipped()
    kept = [ev for ev in events if _complete_ok(ev, expected)]
    assert buckets["gpu"] == kept
    assert (skipped.counts, skipped.gpu, skipped.args_ignored) == (
        expected.counts,
        expected.gpu,
        expected.args_ignored,
    )
    assert skipped.describe() == expected.describe()


def test_column_fast_paths_give_the_general_results():
    values = [1, None, 2**63 - 1, -(2**63)]
    assert int_series("x", values).to_list() == values
    mixed = [1, True, 2**63, 1.0, None, "2"]
    assert int_series("x", mixed).to_list() == [v if int_ok(v) else None for v in mixed]
    assert ids([1, 2**64, None]).to_list()[0::2] == [1, None]
    assert ids([1, 2**64]).to_list()[1] == ids(["18446744073709551616"]).to_list()[0]
    assert ns_from_us([Number("1.00049"), Number("2"), None]).to_list() == [1000, 2000, None]
    assert ns_from_us([Number("1.5"), Number("1e-05")]).to_list() == [1500, 0]
    assert ns_from_us([]).to_list() == []


def _nested(depth: int) -> list:
    value: list = [1]
    for _ in range(depth - 1):
        value = [value]
    return value


# Input Dims and grid values, usual and odd: the text checks must decide as the
# value-by-value ones (floats are Number text here, as the parser leaves them).
SHAPES = [[[8, 128], [], [1]], [], [3, -4], [[1, [2, [3]]]], [2**63 - 1], [-(2**63)],
          [2**63], [-(2**63) - 1], [[1] * 3] * 7, _nested(MAX_DIMS_DEPTH),
          _nested(MAX_DIMS_DEPTH + 1), [[1], [2, [3, [4, [5, [6, 2**64]]]]]], [True], [1, None],
          [Number("1.5")], ["1"], ["[1]"], [{"a": 1}], [[1], "x"], [4, 106, 1], [4, 106],
          [4, 106, 1, 9], [4, 1, 2**63], "[1, 2]", 5, None, {"x": [1]}, Number("2.0")]  # fmt: skip


def test_dims_column_is_dims_text_of_each_value():
    expected = [dims_text(v) for v in SHAPES]
    assert dims_column("d", SHAPES).to_list() == expected
    assert expected[0] == "[[8, 128], [], [1]]" and expected[10] is None and expected[11] is None
    assert dims_column("d", [None, None]).to_list() == [None, None]


def test_axis_columns_are_null_unless_a_list_of_int64():
    args = [{"grid": v} for v in SHAPES] + [{}]
    x, y, z = (c.to_list() for c in axis_columns(args, "grid", ("x", "y", "z")))
    for v, *got in zip([*SHAPES, None], x, y, z, strict=True):
        ok = type(v) is list and all(type(i) is int and int_ok(i) for i in v)
        assert got == [v[i] if ok and len(v) > i else None for i in range(3)], v
    assert (x[-8], y[-8], z[-8]) == (4, 106, 1)


def test_paused_gc_restores_the_collector():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_nanosecond_times_convert_as_the_general_path():
    """Times written to the nanosecond take the digits-only path; it gives what the
    value-by-value conversion gives, and any other value sends all to the latter."""
    texts = ["1712195495519695.812", "0.000", "007.010", "12.999", "9000000000000000.000"]
    expected = [int(Decimal(v) * 1000) for v in texts]
    assert ns_from_us([Number(v) for v in texts]).to_list() == expected
    assert ns_from_us([*map(Number, texts), Number("1.5")]).to_list() == [*expected, 1500]
    assert ns_from_us([Number("-1.000"), Number("2.000"), 3]).to_list() == [-1000, 2000, 3000]
    assert ns_from_us([Number("2.000"), None]).to_list() == [2000, None]
