"""packed_order sorts as a sort by the columns does: keys with nulls last, time, ties.

The waits tables sort the GPU operations and the host's intervals with it
(nsysmap.waits.gaps); a wrong rank or a lost tie would misplace a gap.
"""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from nsysmap.intervals.packed_sort import packed_order
from nsysmap.waits import gaps

KEYS = ["device_id", "stream_id", "step"]
ROW = st.tuples(
    st.sampled_from([0, 3, 1 << 40]),  # device: a code far above the others
    st.one_of(st.none(), st.integers(-2, 2)),  # stream: nulls and negatives
    st.one_of(st.none(), st.integers(0, 3)),
    st.integers(-5, 5),  # start: few values, so that rows tie on it
    st.integers(0, 3),  # end
)


def _frame(rows: list[tuple]) -> pl.DataFrame:
    schema = [*KEYS, "start_ns", "end_ns"]
    frame = pl.DataFrame(rows, schema=dict.fromkeys(schema, pl.Int64), orient="row")
    return frame.with_columns(op_id=pl.int_range(pl.len(), dtype=pl.Int64).reverse())


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(ROW, min_size=1, max_size=40))
def test_packed_order_is_the_sort_by_the_columns(rows):
    frame = _frame(rows)
    order = packed_order(frame, KEYS, "start_ns", ["end_ns", "op_id"])
    assert order is not None
    expected = frame.sort([*KEYS, "start_ns", "end_ns", "op_id"], nulls_last=True)
    assert_frame_equal(frame[order], expected)


def test_times_too_far_apart_or_null_fall_back_to_the_columns():
    frame = _frame([(0, 1, 2, 0, 1), (0, 1, 2, 1 << 61, 1), (1 << 40, 0, None, 5, 6)])
    assert packed_order(frame, KEYS, "start_ns", ["end_ns", "op_id"]) is None
    nulls = _frame([(0, 1, 2, 0, 1), (0, 1, 2, 0, 1)]).with_columns(end_ns=pl.lit(None, pl.Int64))
    assert packed_order(nulls, KEYS, "start_ns", ["end_ns", "op_id"]) is None
    ops = frame.with_columns(
        kind=pl.lit("kernel"),
        pid=pl.lit(1, pl.Int64),
        tid=pl.lit(2, pl.Int64),
        correlation_id="op_id",
        launch_start_ns="start_ns",
        phase=pl.lit(None, pl.String),
        module=pl.lit(None, pl.String),
    )
    expected = ops.select(gaps.COLUMNS).sort(
        [*KEYS, "start_ns", "end_ns", "op_id"], nulls_last=True
    )
    assert_frame_equal(gaps.gpu_ops(ops), expected)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.lists(ROW, min_size=1, max_size=40))
def test_reach_runs_per_stream_and_step_as_windows_over_the_columns(rows):
    """with_reach windows over each (device, stream, step)'s run of the sorted rows: the
    same as windows over the columns, null streams and steps included."""
    frame = _frame(rows).with_columns(end_ns=pl.col("start_ns") + pl.col("end_ns"))
    ordered = frame.sort([*KEYS, "start_ns", "end_ns", "op_id"], nulls_last=True)
    reach = ordered.with_columns(reach=pl.col("end_ns").cum_max().over(gaps.GROUP))
    expected = reach.with_columns(prev_reach=pl.col("reach").shift(1).over(gaps.GROUP))
    assert_frame_equal(gaps.with_reach(ordered), expected)
