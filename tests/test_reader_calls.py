"""The nsys reader's runtime calls (nsys_frames.api_calls_frame): its shortcuts where no
(pid, correlation id) repeats keep what the general paths keep, rows without an id or
a thread among them."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsysmap.core import launch_keys
from nsysmap.read.nsys import nsys_frames, nsys_specs

_STRINGS = nsys_specs.strings_table(
    pl.DataFrame({"id": [0, 1], "value": ["cudaLaunchKernel_v7000", "cudaMemcpyAsync_v3020"]})
)
_TIDS = st.one_of(st.none(), st.sampled_from([(1 << 24) + 1, (1 << 24) + 2, (2 << 24) + 1]))
_ROW = st.tuples(
    _TIDS,
    st.one_of(st.none(), st.integers(0, 12)),  # correlation id
    st.sampled_from([0, 67]),  # eventClass: 67 a backtrace twin
    st.integers(0, 3),  # start
    st.integers(0, 1),  # nameId
)


def _runtime(
    rows: list[tuple[int | None, int | None, int, int, int]], rising: bool
) -> pl.DataFrame:
    if rising:  # as nsys writes them: ids rising in row order, a twin beside its row
        rows = sorted(rows, key=lambda r: (r[1] is None, r[1] or 0, r[2]))
    frame = pl.DataFrame(
        rows, schema=["globalTid", "correlationId", "eventClass", "start", "nameId"], orient="row"
    )
    columns = ["start", "end", "eventClass", "globalTid", "correlationId", "nameId"]
    return frame.with_columns(end=pl.col("start") + 1).select(columns).cast(pl.Int64)


def _general(runtime: pl.DataFrame) -> tuple[pl.DataFrame, int, int]:
    """api_calls_frame with neither shortcut: every key hashed, every row marked."""
    with pytest.MonkeyPatch.context() as patch:
        for module in (nsys_frames, launch_keys):
            patch.setattr(module, "rising_ids", lambda *_args: False)
            patch.setattr(module, "distinct_keys", lambda *_args: False)
        return nsys_frames.api_calls_frame(runtime, _STRINGS)


@given(rows=st.lists(_ROW, max_size=30), rising=st.booleans(), copies=st.integers(0, 3))
def test_the_shortcuts_keep_the_calls_the_general_paths_keep(rows, rising, copies):
    rows = rows + rows[:copies]  # copies of a row (every column alike)
    runtime = _runtime(rows, rising)
    frame, twins, duplicates = nsys_frames.api_calls_frame(runtime, _STRINGS)
    general, general_twins, general_duplicates = _general(runtime)
    assert frame.equals(general)
    assert (twins, duplicates) == (general_twins, general_duplicates)


def test_rising_ids_with_rows_without_an_id_keep_every_call_but_a_copy():
    """The shortcut applies past rows without an id (it skips them) and keeps every
    call; a copy of a call (every column alike) is dropped."""
    tid = (1 << 24) + 1
    rows = [(tid, 1, 0, 0, 0), (tid, None, 0, 1, 0), (tid, 2, 0, 2, 0), (tid, 3, 0, 3, 1)]
    runtime = _runtime(rows, rising=False)
    with_pid = runtime.with_columns(pid=nsys_specs.process_id("globalTid"))
    assert launch_keys.rising_ids(with_pid, "correlationId")
    frame, twins, duplicates = nsys_frames.api_calls_frame(runtime, _STRINGS)
    assert frame["correlation_id"].to_list() == [1, None, 2, 3]
    assert (twins, duplicates) == (0, 0)
    copied = pl.concat([runtime, runtime.slice(2, 1)])
    frame, twins, duplicates = nsys_frames.api_calls_frame(copied, _STRINGS)
    assert frame["correlation_id"].to_list() == [1, None, 2, 3]
    assert (twins, duplicates) == (0, 1)
