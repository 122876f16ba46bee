"""Inference's kernel sequences in launch order, by one packed key or by a sort."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from nsysmap.infer.sequence import ORDER, _sorted

_ROW = st.tuples(
    st.one_of(st.none(), st.integers(0, 2)),  # device_id
    st.integers(-1, 3),  # pid
    st.integers(0, 20),  # order_ns: launches at one instant
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(_ROW, max_size=40), st.randoms())
def test_sequences_are_in_the_sorts_order(rows, rnd):
    ids = list(range(len(rows)))
    rnd.shuffle(ids)  # op ids tell every row apart, in no particular order
    frame = pl.DataFrame(
        {
            "op_id": ids,
            "device_id": [d for d, _, _ in rows],
            "pid": [p for _, p, _ in rows],
            "order_ns": [t for _, _, t in rows],
        },
        schema={c: pl.Int64 for c in ORDER},
    )
    assert_frame_equal(_sorted(frame), frame.sort(ORDER))
