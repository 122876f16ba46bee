"""One de-duplication rule for launch calls, used by the nsys reader and the attribution."""

from __future__ import annotations

import polars as pl
import pytest

from nsysmap.launch_keys import call_key, first_calls


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
