"""One de-duplication rule for launch calls, used by the nsys reader and the attribution."""

from __future__ import annotations

import random

import polars as pl
import pytest

from nsysmap.core import launch_keys
from nsysmap.core.launch_keys import call_key, first_calls


@pytest.mark.parametrize("corr", [7, 2**40, -3])  # packed key, and the struct key
def test_the_earliest_call_of_a_pid_and_id_wins_whatever_the_row_order(corr):
    calls = pl.DataFrame(
        {
            "pid": [1, 1, 2, 1, 1, 1, 1],
            "tid": [5, 4, 1, 4, 1, 1, 1],
            "correlation_id": [corr, corr, corr, corr, None, None, 9],
            "start_ns": [30, 20, 50, 20, 1, 1, 2],
        }
    )
    # row 1 and 3 tie on start and tid: the earlier row wins; rows without an id stay.
    assert first_calls(calls).to_list() == [False, True, True, False, True, True, True]


def test_ties_on_start_go_to_the_lower_thread_id():
    calls = pl.DataFrame(
        {"pid": [1, 1], "tid": [9, 3], "correlation_id": [4, 4], "start_ns": [10, 10]}
    )
    assert first_calls(calls).to_list() == [False, True]


def test_the_packed_key_needs_every_frame_to_fit():
    small = pl.DataFrame({"pid": [1], "correlation_id": [3]})
    assert call_key(small) is not None
    assert call_key(small, pl.DataFrame({"pid": [1 << 24], "correlation_id": [3]})) is None
    assert call_key(small, pl.DataFrame({"pid": [1], "correlation_id": [1 << 39]})) is None
    no_pid = pl.DataFrame(
        {"pid": [None], "correlation_id": [3]}, schema_overrides={"pid": pl.Int64}
    )
    assert call_key(no_pid) is None


def _general(calls: pl.DataFrame) -> pl.Series:
    """first_calls without its rising-ids shortcut: the general path's answer."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(launch_keys, "rising_ids", lambda *_args: False)
        return first_calls(calls)


@pytest.mark.parametrize(
    ("ids", "pids", "rising"),
    [
        ([1, 2, 5, 3, 4, 9], [1, 1, 1, 2, 2, 2], True),  # rising per process, not overall
        ([1, None, 2, 3, None, 7], [1, 1, 1, 2, 2, 2], True),  # rows without an id skipped
        ([1, 2, 2, 3, 4, 9], [1, 1, 1, 2, 2, 2], False),  # a repeat
        ([1, 3, 2, 3, 4, 9], [1, 1, 1, 2, 2, 2], False),  # falls back: a repeat after a drop
        ([5, 4, 3, 3, 4, 9], [1, 1, 1, 2, 2, 2], False),  # falling, no repeat: general path
        ([1, 2, 3, 4, 5, 6], [1, None, 1, None, 2, 2], False),  # a pid missing: general path
        ([1, 2, 1, 4, 5, 6], [1, None, None, None, 2, 2], False),
    ],
)
def test_rising_ids_keep_every_call_as_the_general_path_does(ids, pids, rising):
    calls = pl.DataFrame(
        {
            "pid": pids,
            "tid": [1, 2, 1, 2, 1, 2],
            "correlation_id": ids,
            "start_ns": [60, 50, 40, 30, 20, 10],
        },
        schema_overrides={"pid": pl.Int64, "correlation_id": pl.Int64},
    )
    assert launch_keys.rising_ids(calls) is rising
    fast, general = first_calls(calls), _general(calls)
    assert fast.equals(general, check_names=True)
    assert fast.dtype == general.dtype
    assert fast.all() or not rising


def test_calls_without_a_pid_are_told_apart_by_their_ids():
    """Some calls lack a process id: (null, 5) and (null, 6) are two calls, not one."""
    calls = pl.DataFrame(
        {
            "pid": [None, None, 7, 7],
            "correlation_id": [5, 6, 5, 5],
            "start_ns": [10, 20, 30, 40],
            "tid": [1, 1, 1, 1],
        },
        schema={"pid": pl.Int64, "correlation_id": pl.Int64, "start_ns": pl.Int64, "tid": pl.Int64},
    )
    assert call_key(calls) is None
    assert first_calls(calls).to_list() == [True, True, True, False]


@pytest.mark.parametrize("seed", range(12))
def test_distinct_keys_says_what_marking_every_row_says(seed):
    """The one count of distinct keys answers as `is_unique` over every row with an id,
    with the packed key and the struct key (a pid missing, or an id past 2**39)."""
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    big = 2**40 if seed % 3 == 2 else 0
    calls = pl.DataFrame(
        {
            "pid": [
                None if seed % 3 == 1 and rng.random() < 0.2 else rng.randint(1, 3)
                for _ in range(n)
            ],
            "correlation_id": [
                None if rng.random() < 0.1 else big + rng.randint(0, 3 * n) for _ in range(n)
            ],
        },
        schema={"pid": pl.Int64, "correlation_id": pl.Int64},
    )
    keyed = calls.filter(pl.col("correlation_id").is_not_null())
    marked = keyed.select(pl.struct("pid", "correlation_id").is_unique().all()).item()
    assert launch_keys.distinct_keys(calls) is bool(marked)


def test_falling_ids_that_never_repeat_keep_every_call_and_none_is_ambiguous():
    calls = pl.DataFrame(
        {
            "pid": [1, 1, 1, 2],
            "tid": [1, 2, 1, 1],
            "correlation_id": [9, 4, None, 9],
            "start_ns": [1, 2, 3, 4],
        }
    )
    assert not launch_keys.rising_ids(calls.filter(pl.col("pid") == 1).drop_nulls())
    assert first_calls(calls).to_list() == [True, True, True, True]
    assert launch_keys.ambiguous_keys(calls).is_empty()
    repeated = calls.with_columns(correlation_id=pl.Series([9, 4, None, 9]).replace(4, 9))
    assert first_calls(repeated).to_list() == [True, False, True, True]
    assert launch_keys.ambiguous_keys(repeated).rows() == [(1, 9)]
