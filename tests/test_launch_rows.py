"""Launch calls found by slot (nsysmap.attribution.launch_rows) against the join."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import nsysmap.attribution.attribute as attribute
from nsysmap.attribution.launch_rows import call_rows

_IDS = st.one_of(st.none(), st.integers(0, 40))
_PIDS = st.one_of(st.none(), st.sampled_from([3, 7, 1 << 20]))


def _calls(pairs: list[tuple[int | None, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "pid": [p for p, _ in pairs],
            "tid": [i % 3 for i in range(len(pairs))],
            "correlation_id": [c for _, c in pairs],
            "api_name": [f"cudaLaunchKernel_{i}" for i in range(len(pairs))],
            "start_ns": [10 * i for i in range(len(pairs))],
            "end_ns": [10 * i + 4 for i in range(len(pairs))],
        },
        schema_overrides={"pid": pl.Int64, "correlation_id": pl.Int64},
    )


def _ops(pairs: list[tuple[int | None, int | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        {"op_id": list(range(len(pairs))), "pid": [p for p, _ in pairs]}
        | {"correlation_id": [c for _, c in pairs]},
        schema={"op_id": pl.Int64, "pid": pl.Int64, "correlation_id": pl.Int64},
    )


def _joined(ops: pl.DataFrame, calls: pl.DataFrame, by_slot: bool) -> pl.DataFrame:
    with pytest.MonkeyPatch.context() as patch:
        if not by_slot:
            patch.setattr(attribute, "call_rows", lambda calls, ops: None)
        return attribute._launch_join(ops, calls)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(_PIDS, st.integers(0, 40)), max_size=30),
    st.lists(st.tuples(_PIDS, _IDS), max_size=30),
)
def test_slots_give_the_joins_rows(call_pairs, op_pairs):
    calls, ops = _calls(call_pairs), _ops(op_pairs)
    rows = call_rows(calls, ops)
    keys = calls.select("pid", "correlation_id")
    if rows is None:
        nulls = keys.null_count().sum_horizontal().item()
        assert nulls or keys.is_duplicated().any() or keys.is_empty()
        return
    assert not keys.is_duplicated().any()
    expected = _joined(ops, calls, by_slot=False)
    assert_frame_equal(_joined(ops, calls, by_slot=True), expected)


def test_sparse_ids_and_shared_pairs_are_joined():
    few = _calls([(3, 0), (3, 5_000_000)])  # ids far apart: a slot table too large
    assert call_rows(few, _ops([(3, 0)])) is None
    shared = _calls([(3, 4), (3, 4)])  # two calls of one pair: a row per match
    assert call_rows(shared, _ops([(3, 4)])) is None
    dense = _calls([(3, i) for i in range(1, 100)] + [(7, i) for i in range(1, 50)])
    found = call_rows(dense, _ops([(7, 1), (3, 99), (5, 1), (3, 100), (None, 1), (3, None)]))
    assert found is not None
    assert found.to_list() == [99, 98, None, None, None, None]


def test_every_pair_of_two_processes_finds_its_own_call():
    pairs = [(3, i) for i in range(1, 21) if i % 4] + [(7, i) for i in range(0, 11)]
    calls = _calls(pairs)
    probes = [(p, i) for p in (3, 5, 7, None) for i in (*range(0, 26), None)]
    ops = _ops(probes)
    rows = call_rows(calls, ops)
    assert rows is not None and rows.is_not_null().sum() == len(pairs)
    assert_frame_equal(_joined(ops, calls, by_slot=True), _joined(ops, calls, by_slot=False))
