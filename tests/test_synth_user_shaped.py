"""The user-shaped benchmark export (devtools.synth.user_shaped) has the reported shape.

The report: 2.2 M kernels, 7.1 M runtime calls, 15.9 M NVTX ranges on 5 threads,
operator ranges nested deep. Counted here in the written file with SQL, at a
scale of a few steps.
"""

from __future__ import annotations

import sqlite3

import pytest

from devtools.synth import write_export
from devtools.synth.user_shaped import user_shaped_tables

pytestmark = pytest.mark.slow  # generates an export of a few thousand kernels
SCALE = 1e-3
RANGES = "FROM NVTX_EVENTS WHERE eventType IN (59, 60)"


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> sqlite3.Connection:
    path = write_export(tmp_path_factory.mktemp("user") / "user.sqlite", user_shaped_tables(SCALE))
    return sqlite3.connect(path)


def _count(conn: sqlite3.Connection, sql: str) -> int:
    return int(conn.execute(sql).fetchone()[0])


def test_kernels_calls_and_ranges_are_in_the_reported_ratio(export):
    kernels = _count(export, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    calls = _count(export, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    ranges = _count(export, f"SELECT count(*) {RANGES}")
    assert kernels == pytest.approx(2.2e6 * SCALE, rel=0.25)  # whole steps of ~445 kernels
    assert calls / kernels == pytest.approx(7.1 / 2.2, rel=0.01)
    assert ranges / kernels == pytest.approx(15.9 / 2.2, rel=0.01)


def test_ranges_are_on_five_threads_of_one_process(export):
    assert _count(export, f"SELECT count(DISTINCT globalTid) {RANGES}") == 5
    assert _count(export, f"SELECT count(DISTINCT globalTid >> 24) {RANGES}") == 1
    named = _count(export, "SELECT count(*) FROM ThreadNames")
    assert named == 5


def test_operator_ranges_nest_deep(export):
    """The deepest nesting on any thread (ranges in start order, a stack of their ends)."""
    order = 'ORDER BY globalTid, start, "end" DESC'  # an outer range before those it holds
    rows = export.execute(f'SELECT globalTid, start, "end" {RANGES} {order}')
    deepest: dict[int, int] = {}
    open_ends: dict[int, list[int]] = {}
    for tid, start, end in rows:
        stack = open_ends.setdefault(tid, [])
        while stack and stack[-1] <= start:
            stack.pop()
        stack.append(end)
        deepest[tid] = max(deepest.get(tid, 0), len(stack))
    assert max(deepest.values()) >= 12
    operators = f"SELECT count(*) {RANGES} AND text LIKE 'aten::copy_%'"
    assert _count(export, operators) > 0  # inline operator ranges, as PyTorch writes them
