"""by_range: GPU time per range path, exclusive and inclusive, on hand-checkable reports."""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from nsysmap.attribution.attribute import attribute
from nsysmap.summaries import by_range as rg
from nsysmap.summaries import range_paths, range_tree
from nsysmap.summaries.summarise import combine_summaries, partial_summaries, summarise
from tests.frames import MS, Frames


def _table(frames: Frames) -> pl.DataFrame:
    report = frames.profile()
    return summarise(attribute(report), report.ranges).by_range


def _rows(table: pl.DataFrame, device: int = 0) -> dict:
    cols = ["calls", "ops", "time_ns", "inclusive_ops", "inclusive_ns", "span_ns"]
    picked = table.filter(pl.col("device_id") == device)
    return {r[0]: tuple(r[1:]) for r in picked.select("range_path", *cols).iter_rows()}


def _sample() -> Frames:
    """One thread: A [0, 100) holding B twice, C with two addmm calls; kernels of 1..10 ms."""
    f = Frames()
    f.range(1, "A", 0, 100)
    f.range(1, "B", 10, 30)
    f.range(1, "B", 40, 60)
    f.range(1, "C", 70, 90)
    f.range(1, "aten::addmm, seq = 1, op_id = 5, sizes = [[2], [2, 2]]", 72, 80)
    f.range(1, "aten::addmm, op_id = 9, seq = 2, input_op_ids = [(5,0)]", 80, 88)
    f.kernel(1, 5, dur=1)  # A itself, runs 6..7
    f.kernel(1, 12, dur=2)  # B #1, 13..15
    f.kernel(1, 20, dur=3, run_at=25)  # B #1, 25..28
    f.kernel(1, 45, dur=4)  # B #2, 46..50
    f.kernel(1, 73, dur=5)  # addmm #1, 74..79
    f.kernel(1, 81, dur=6)  # addmm #2, 82..88
    f.kernel(1, 95, dur=7)  # A itself, 96..103
    f.kernel(1, 200, dur=8)  # outside every range
    f.kernel(None, 0, dur=9)  # no launch call
    f.kernel(1, 15, dur=10, device=1)  # B #1, on device 1
    return f


def test_exclusive_inclusive_calls_and_span_by_hand():
    table = _table(_sample())
    assert _rows(table) == {
        "A": (1, 2, 8 * MS, 7, 28 * MS, 97 * MS),
        "A > B": (2, 3, 9 * MS, 3, 9 * MS, (15 + 4) * MS),
        "A > C": (1, 0, 0, 2, 11 * MS, 14 * MS),
        "A > C > aten::addmm": (2, 2, 11 * MS, 2, 11 * MS, (5 + 6) * MS),
        None: (0, 2, 17 * MS, 2, 17 * MS, None),
    }
    assert _rows(table, 1) == {
        "A": (1, 0, 0, 1, 10 * MS, 10 * MS),
        "A > B": (1, 1, 10 * MS, 1, 10 * MS, 10 * MS),
    }


def test_exclusive_time_adds_up_to_each_device_total():
    table = _table(_sample())
    totals = dict(table.group_by("device_id").agg(pl.col("time_ns").sum()).iter_rows())
    assert totals == {0: 45 * MS, 1: 10 * MS}
    shares = dict(table.group_by("device_id").agg(pl.col("time_share").sum()).iter_rows())
    assert shares == pytest.approx({0: 1.0, 1: 1.0})


def test_inclusive_time_of_a_path_is_the_sum_over_its_subtree():
    table = _table(_sample()).filter(pl.col("device_id") == 0)
    own = dict(table.select("range_path", "time_ns").iter_rows())
    for path, inclusive in table.select("range_path", "inclusive_ns").iter_rows():
        if path is None:
            continue
        below = sum(t for p, t in own.items() if p and (p == path or p.startswith(path + " > ")))
        assert inclusive == below, path


def test_operator_ids_are_stripped_so_repeated_calls_group():
    f = Frames()
    f.range(1, "forward pass", 0, 50)
    for i, start in enumerate((0, 10, 20)):
        name = f"aten::mm, seq = {i}, op_id = {90 + i}, sizes = [[{i + 1}, 4]]"
        f.range(1, name, start, start + 5)
        f.kernel(1, start + 1, dur=2)
    f.range(2, "MmBackward0, stashed seq = 0, op_id = 100, sizes = [[1, 4]]", 60, 70)
    f.range(2, "MmBackward0, stashed seq = 1, op_id = 101", 70, 80)
    f.kernel(2, 61, dur=1)
    f.kernel(2, 71, dur=1)
    rows = _rows(_table(f))
    assert rows["forward pass > aten::mm"] == (3, 3, 6 * MS, 3, 6 * MS, 6 * MS)
    assert rows["MmBackward0"][:3] == (2, 2, 2 * MS)
    assert set(rows) == {"forward pass", "forward pass > aten::mm", "MmBackward0"}


def test_steps_group_under_one_path_with_their_number_as_a_star():
    f = Frames()
    for step, start in ((1, 0), (2, 50)):
        f.range(1, f"ProfilerStep#{step}", start, start + 40)
        f.range(1, "forward", start + 1, start + 20)
        f.range(1, f"nsysmap:step:{step}", start + 21, start + 30)
        f.kernel(1, start + 2, dur=2)
        f.kernel(1, start + 22, dur=1)
    rows = _rows(_table(f))
    assert rows == {
        "ProfilerStep#*": (2, 0, 0, 4, 6 * MS, (21 + 21) * MS),
        "ProfilerStep#* > forward": (2, 2, 4 * MS, 2, 4 * MS, 4 * MS),
        "ProfilerStep#* > nsysmap:step:*": (2, 2, 2 * MS, 2, 2 * MS, 2 * MS),
    }


def test_a_report_too_long_to_pack_takes_the_general_path(monkeypatch):
    f = _sample()
    f.range(1, "late", 4_000_000_000_000, 4_000_000_000_010)  # 4e18 ns: past 62 bits
    f.range(2, "other thread", 0, 10)
    f.kernel(1, 4_000_000_000_001, dur=1)
    general, sorted_preorder = [], range_tree._sorted_preorder
    spy = lambda x: general.append(1) or sorted_preorder(x)  # noqa: E731
    monkeypatch.setattr(range_tree, "_sorted_preorder", spy)
    rows = _rows(_table(f))
    assert general and rows["late"] == (1, 1, MS, 1, MS, MS)
    assert rows["A > B"] == (2, 3, 9 * MS, 3, 9 * MS, (15 + 4) * MS)


@pytest.mark.slow
def test_the_general_path_equals_the_packed_one(monkeypatch):
    for frames in (_sample(), _nested_sample()):
        packed = _table(frames)
        with monkeypatch.context() as m:
            m.setattr(range_tree, "_packed_preorder", lambda *_: None)
            assert_frame_equal(_table(frames), packed)


@pytest.mark.slow
@pytest.mark.parametrize("renumber", ["gaps", "shuffled"])
def test_range_ids_with_gaps_or_out_of_order_give_the_same_table(renumber):
    """Leaves and parents find their range by offset (ids without gaps), by a
    binary search (gaps) or by a join (ids not increasing): one table."""
    for frames in (_sample(), _nested_sample()):
        report = frames.profile()
        ops, ranges = attribute(report), report.ranges
        expected = rg.by_range(rg.range_leaves(ops), ranges)
        n = ranges.height
        new_ids = pl.Series([10 * i + 3 for i in range(n)])
        if renumber == "shuffled":
            new_ids = new_ids.reverse()
        renamed = dict(zip(ranges["range_id"].to_list(), new_ids.to_list(), strict=True))
        ids = pl.col("range_id").replace_strict(renamed, default=None)
        parents = pl.col("parent_id").replace_strict(renamed, default=None)
        moved = ranges.with_columns(range_id=ids, parent_id=parents)
        moved_ops = ops.with_columns(range_id=ids)
        assert_frame_equal(rg.by_range(rg.range_leaves(moved_ops), moved), expected)


@pytest.mark.slow
@pytest.mark.parametrize("unknown", [-1, 7, 10**9])
def test_an_operation_in_an_unknown_range_is_an_error(unknown):
    report = _sample().profile()
    ops = attribute(report).with_columns(
        range_id=pl.when(pl.col("range_id") == 1).then(unknown).otherwise(pl.col("range_id"))
    )
    assert 7 not in report.ranges["range_id"].to_list()
    with pytest.raises(ValueError, match="not in the ranges"):
        rg.by_range(rg.range_leaves(ops), report.ranges)


def test_names_keep_their_domain_and_text():
    f = Frames()
    f.range(1, "computing softmax", 0, 10)
    f.kernel(1, 1, dur=2)
    report = f.profile()
    ranges = report.ranges.with_columns(domain=pl.lit("cs336"))
    table = summarise(attribute(report), ranges).by_range
    row = table.row(0, named=True)
    assert (row["range_path"], row["range_name"], row["domain"], row["range_depth"]) == (
        "computing softmax",
        "computing softmax",
        "cs336",
        1,
    )


def test_no_ranges_gives_one_null_row_per_device():
    f = Frames()
    f.kernel(1, 1, dur=2)
    f.kernel(1, 5, dur=3, device=1)
    table = _table(f)
    assert table.select("device_id", "range_path", "ops", "time_ns").rows() == [
        (0, None, 1, 2 * MS),
        (1, None, 1, 3 * MS),
    ]


def _nested_sample() -> Frames:
    f = Frames()
    f.range(1, "r0", 0, 100)
    f.range(1, "r1", 1, 99)
    f.range(1, "r2", 2, 40)
    f.range(1, "r3", 3, 30)  # r0 > r1 > r2 > r3
    f.range(1, "r2", 50, 60)  # a second r0 > r1 > r2
    f.kernel(1, 4, dur=2)  # innermost r3, runs 5..7
    f.kernel(1, 2, dur=3, run_at=10)  # innermost the first r2, 10..13
    f.kernel(1, 51, dur=5)  # innermost the second r2, 52..57
    f.kernel(1, 1, dur=1, run_at=60)  # innermost r1, 60..61
    return f


def test_ranges_nested_deeper_than_the_limit_fold_into_one_row(monkeypatch):
    monkeypatch.setattr(rg, "MAX_PATH_DEPTH", 2)
    assert _rows(_table(_nested_sample())) == {
        "r0": (1, 0, 0, 4, 11 * MS, 56 * MS),
        "r0 > r1": (1, 1, 1 * MS, 4, 11 * MS, 56 * MS),
        "r0 > r1 > …": (1, 3, 10 * MS, 3, 10 * MS, 52 * MS),
    }


@pytest.mark.slow
@pytest.mark.parametrize("sample", [_nested_sample, _sample, "two threads"])
def test_windows_by_position_equal_windows_by_key(sample, monkeypatch):
    """Each thread on one device: a range's leaves are found by counting leaves per
    position; the general lookup by (device, position) gives the same table."""
    frames = sample() if callable(sample) else _two_threads()
    taken = []
    by_position = range_tree._windows_by_position
    monkeypatch.setattr(
        range_tree, "_windows_by_position", lambda *a: taken.append(1) or by_position(*a)
    )
    fast = _table(frames)
    assert bool(taken) == (sample is not _sample)  # _sample's thread 1 launches on two devices
    monkeypatch.setattr(range_tree, "_windows_by_position", range_tree._windows_by_key)
    assert_frame_equal(_table(frames), fast)


def _two_threads() -> Frames:
    """`_nested_sample` on thread 1 (device 0), and a nesting on thread 2 launching on device 1."""
    f = _nested_sample()
    f.range(2, "s0", 0, 100)
    f.range(2, "s1", 10, 60)
    f.range(2, "s2", 20, 30)
    for at, dur, run_at in ((5, 2, 8), (15, 3, 40), (21, 1, 22), (25, 6, 30), (70, 4, 90)):
        f.kernel(2, at, dur=dur, device=1, run_at=run_at)
    return f


def test_summarise_without_ranges_leaves_by_range_empty():
    f = _sample()
    assert summarise(attribute(f.profile())).by_range.is_empty()


@pytest.mark.slow
def test_block_by_block_equals_in_memory():
    report = _sample().profile()
    ops = attribute(report)
    whole = summarise(ops, report.ranges).by_range
    for size in (1, 3, 4):
        parts = [partial_summaries(ops.slice(i, size)) for i in range(0, ops.height, size)]
        assert_frame_equal(combine_summaries(parts, report.ranges).by_range, whole)


# ------------------------------------------------------------------ reference

_FIELDS = re.compile(r", (?:stashed seq|seq|op_id|sizes|input_op_ids) = .*$", re.S)
_STEP = re.compile(r"^(ProfilerStep#)\d+$")


def reference_by_range(ops: pl.DataFrame, ranges: pl.DataFrame) -> dict:
    """(device, path) -> (calls, ops, time, inclusive ops, inclusive time, span), by climbing."""
    info = {r["range_id"]: r for r in ranges.iter_rows(named=True)}

    def path(rid: int) -> str:
        names = []
        while rid is not None:
            names.append(_STEP.sub(r"\1*", _FIELDS.sub("", info[rid]["name"] or "")))
            rid = info[rid]["parent_id"]
        return " > ".join(reversed(names))

    def chain(rid: int | None) -> set[int]:
        found = set()
        while rid is not None:
            found.add(rid)
            rid = info[rid]["parent_id"]
        return found

    own: dict = defaultdict(lambda: [0, 0])
    inst: dict = {}
    for op in ops.iter_rows(named=True):
        dev, rid = op["device_id"], op["range_id"]
        key = (dev, None if rid is None else path(rid))
        own[key][0] += 1
        own[key][1] += op["dur_ns"]
        # Inside every range around its launch, and every range around the one on
        # another thread that gave it its step or phase.
        for inside in chain(rid) | chain(op["other_thread_range_id"]):
            i = inst.setdefault((dev, inside), [0, 0, op["start_ns"], op["end_ns"]])
            i[0] += 1
            i[1] += op["dur_ns"]
            i[2], i[3] = min(i[2], op["start_ns"]), max(i[3], op["end_ns"])
    out: dict = {}
    for (dev, rid), (n, t, first, last) in inst.items():
        row = out.setdefault((dev, path(rid)), [0, 0, 0, 0])
        row[0] += 1
        row[1] += n
        row[2] += t
        row[3] += last - first
    result = {
        key: (calls, *own.get(key, (0, 0)), n, t, span) for key, (calls, n, t, span) in out.items()
    }
    for (dev, p), (n, t) in own.items():
        if p is None:
            result[(dev, None)] = (0, n, t, n, t, None)
    return result


_NAMES = st.sampled_from(
    [
        *("fwd", "attention", "aten::mm, seq = 3, op_id = 7", "aten::mm, op_id = 8", "x", ""),
        *("backward pass", "ProfilerStep#2"),  # a phase and a step: taken by the other thread
    ]
)


@st.composite
def nested_ranges(draw: st.DrawFn, lo: int = 0, hi: int = 100, depth: int = 4) -> list:
    """(name, start, end) of ranges nested inside [lo, hi): up to 4 children a level."""
    size = min(8 if depth else 0, hi - lo + 1)
    cuts = draw(st.lists(st.integers(lo, hi), min_size=size // 2, max_size=size, unique=True))
    cuts.sort()
    out = []
    for start, end in zip(cuts[::2], cuts[1::2], strict=False):
        out.append((draw(_NAMES), start, end))
        out.extend(draw(nested_ranges(start, end, depth - 1)))
    return out


@pytest.mark.slow  # a property test against the reference: seconds
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nested_ranges(),
    nested_ranges(),
    st.lists(
        st.tuples(st.sampled_from([1, 2, None]), st.integers(0, 100), st.integers(0, 1)),
        min_size=20,
        max_size=60,
    ),
    st.integers(1, 7),
)
def test_matches_a_reference_that_climbs_every_operation(one, two, launches, block):
    f = Frames()
    for tid, rows in ((1, one), (2, two)):
        for name, start, end in rows:
            f.range(tid, name, start, end)
    for i, (tid, at, device) in enumerate(launches):
        f.kernel(tid, at, dur=1 + i % 4, device=device, run_at=at + i % 3)
    report = f.profile()
    ops = attribute(report)
    table = summarise(ops, report.ranges).by_range
    cols = ["calls", "ops", "time_ns", "inclusive_ops", "inclusive_ns", "span_ns"]
    rows = table.select("device_id", "range_path", *cols).rows()
    got = {(r[0], r[1]): tuple(r[2:]) for r in rows}
    assert got == reference_by_range(ops, report.ranges)
    parts = [partial_summaries(ops.slice(i, block)) for i in range(0, max(ops.height, 1), block)]
    assert_frame_equal(combine_summaries(parts, report.ranges).by_range, table)


@pytest.mark.slow
@given(
    st.lists(st.tuples(st.integers(-50, 50), st.integers(-50, 50)), min_size=1, max_size=70),
    st.lists(st.tuples(st.integers(0, 69), st.integers(1, 70)), max_size=30),
)
def test_window_extrema_and_sums_match_brute_force(values, windows):
    first = pl.Series([a for a, _ in values], dtype=pl.Int64)
    last = pl.Series([b for _, b in values], dtype=pl.Int64)
    windows = [(lo, min(lo + w, len(values))) for lo, w in windows if lo < len(values)]
    lo = pl.Series([a for a, _ in windows], dtype=pl.UInt32)
    hi = pl.Series([b for _, b in windows], dtype=pl.UInt32)
    low, high = range_tree.window_extrema(first, last, lo, hi)
    sums = range_tree.window_sum(first, lo, hi)
    for i, (a, b) in enumerate(windows):
        assert low[i] == min(first[a:b]) and high[i] == max(last[a:b])
        assert sums[i] == sum(first[a:b])


def test_window_extrema_over_wide_windows_agree_with_a_running_minimum():
    """Windows up to 5,000 leaves wide (13 levels of the sparse table), every width at
    and beside a power of two, against a plain minimum and maximum of each slice."""
    rng = np.random.default_rng(7)
    n = 6000
    first = pl.Series(rng.integers(-(10**12), 10**12, n), dtype=pl.Int64)
    last = pl.Series(rng.integers(-(10**12), 10**12, n), dtype=pl.Int64)
    widths = sorted({w for p in range(13) for w in (2**p - 1, 2**p, 2**p + 1) if 0 < w <= 5000})
    starts = [int(rng.integers(0, n - w + 1)) for w in widths]
    lo = pl.Series(starts, dtype=pl.UInt32)
    hi = pl.Series([a + w for a, w in zip(starts, widths, strict=True)], dtype=pl.UInt32)
    low, high = range_tree.window_extrema(first, last, lo, hi)
    for i, (a, w) in enumerate(zip(starts, widths, strict=True)):
        assert low[i] == first[a : a + w].min() and high[i] == last[a : a + w].max(), w


def test_window_extrema_pass_over_null_values():
    """A leaf without a time (null) counts for neither end of a window holding it."""
    first = pl.Series([5, None, 3, None, 9], dtype=pl.Int64)
    last = pl.Series([None, 8, 4, None, 1], dtype=pl.Int64)
    lo = pl.Series([0, 1, 0, 3], dtype=pl.UInt32)
    hi = pl.Series([2, 3, 5, 5], dtype=pl.UInt32)
    low, high = range_tree.window_extrema(first, last, lo, hi)
    assert low.to_list() == [5, 3, 3, 9]
    assert high.to_list() == [8, 8, 8, 1]


def test_path_key_codes_agree_with_path_keys():
    names = pl.Series(
        [
            "ProfilerStep#3",
            "aten::addmm, seq = 1, op_id = 5",
            "ProfilerStep#12",
            None,
            "aten::addmm, op_id = 9",
            "nsysmap:step:0",
            "",
            "aten::mm, op_id = 2",
            "ProfilerStep#3",
        ]
    )
    codes, keys = range_paths.path_key_codes(names)
    expected = range_paths.path_keys(names)
    assert keys.gather(codes).to_list() == expected.to_list()
    assert keys.n_unique() == keys.len() == expected.n_unique()
    assert codes[0] == codes[2] and codes[1] == codes[4] and codes[3] == codes[6]


def test_kernels_from_a_thread_without_ranges_count_in_the_phase_range():
    """Backward kernels launched from autograd's thread, which has no ranges, count
    under the user's `backward pass` range that gave them their phase."""
    f = Frames()
    f.range(1, "train step", 0, 100)
    f.range(1, "forward pass", 0, 40)
    f.range(1, "backward pass", 50, 90)
    f.kernel(1, 10, dur=2)
    f.kernel(2, 60, dur=3)  # autograd's thread: no range of its own
    f.kernel(2, 70, dur=4)
    rows = _rows(_table(f))
    cols = ("calls", "ops", "time_ns", "inclusive_ops", "inclusive_ns")
    got = {path: dict(zip(cols, rows[path][:5], strict=True)) for path in rows}
    assert got["train step > backward pass"] == {
        "calls": 1,
        "ops": 2,
        "time_ns": 7 * MS,
        "inclusive_ops": 2,
        "inclusive_ns": 7 * MS,
    }
    assert got["train step"]["inclusive_ns"] == 9 * MS
    assert None not in rows  # nothing left outside every range


def test_kernels_launched_inside_their_own_threads_ranges_count_in_the_phase_range_too():
    """autograd's thread has operator ranges of its own: its kernels stay there
    (exclusive) and also count inside the user's `backward pass` (inclusive)."""
    f = Frames()
    f.range(1, "train step", 0, 100)
    f.range(1, "backward pass", 50, 90)
    f.range(2, "autograd::engine::evaluate_function: MmBackward0", 55, 80)
    f.kernel(1, 10, dur=2)
    f.kernel(2, 60, dur=3)
    f.kernel(2, 70, dur=4)
    rows = _rows(_table(f))
    mm = "autograd::engine::evaluate_function: MmBackward0"
    assert rows[mm][:5] == (1, 2, 7 * MS, 2, 7 * MS)
    assert rows["train step > backward pass"][:5] == (1, 0, 0, 2, 7 * MS)
    assert rows["train step"][:5] == (1, 1, 2 * MS, 3, 9 * MS)
    assert rows["train step > backward pass"][5] == 14 * MS  # span: 61 ms to 75 ms


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        # tid (more threads than one pass each would take), start, length
        st.tuples(st.integers(1, 20), st.integers(0, 6), st.integers(0, 4)),
        min_size=1,
        max_size=30,
    ),
    st.booleans(),
)
def test_ranges_in_start_order_put_thread_by_thread_give_the_sorted_preorder(rows, in_order):
    """Ranges in start order are put in (thread, start) order by a stable sort of their
    thread codes rather than a sort of the packed keys: the pre-order must be the one
    the sort and the general path give, ranges sharing a start included."""
    ranges = pl.DataFrame(rows, schema=["tid", "start_ns", "length"], orient="row")
    if in_order:
        ranges = ranges.sort("start_ns", maintain_order=True)
    ranges = ranges.select(
        range_id=pl.int_range(pl.len(), dtype=pl.Int64),
        pid=pl.lit(1, pl.Int64),
        tid=pl.col("tid").cast(pl.Int64),
        start_ns=pl.col("start_ns").cast(pl.Int64),
        end_ns=(pl.col("start_ns") + pl.col("length")).cast(pl.Int64),
        depth=pl.lit(None, pl.Int32),
        parent_id=pl.lit(None, pl.Int64),
    )
    passes = range_tree.preorder(ranges)
    with pytest.MonkeyPatch.context() as patch:  # no thread-by-thread order: one sort
        patch.setattr(range_tree, "group_order", lambda *_: None)
        assert_frame_equal(passes, range_tree.preorder(ranges))
    general = range_tree._sorted_preorder
    assert_frame_equal(passes.drop("parent"), _general_preorder(ranges, general))


def _general_preorder(ranges: pl.DataFrame, general) -> pl.DataFrame:
    """`preorder`'s columns but the parent, by the sort on the columns."""
    frame = ranges.with_row_index("row").select(
        "row", "range_id", "start_ns", "depth", "parent_id", g=pl.col("tid").rank("dense") - 1
    )
    frame = frame.with_columns(g=pl.col("g").cast(pl.UInt32), end=ranges["end_ns"])
    return general(frame).select("pos", "row", "range_id", "g", "depth", "stop")


def test_leaves_in_position_order_or_not_give_the_same_instances():
    """`_windows_by_position` sorts the leaves by position only when they are out of
    order: leaves given sorted, reversed or shuffled give the same windows."""
    ranges = pl.DataFrame(
        {
            "range_id": [0, 1, 2, 3, 4],
            "pid": [1, 1, 1, 1, 1],
            "tid": [1, 1, 1, 2, 2],
            "start_ns": [0, 10, 20, 0, 50],
            "end_ns": [100, 60, 30, 40, 90],
            "depth": pl.Series([1, 2, 3, 1, 1], dtype=pl.Int32),
            "parent_id": [None, 0, 1, None, None],
        }
    )
    forest = range_tree.preorder(ranges)
    pos = pl.Series([0, 1, 2, 2, 3, 4], dtype=pl.UInt32)
    placed = pl.DataFrame(
        {
            "device_id": [0, 0, 0, 0, 1, 1],
            "pos": pos,
            "g": forest["g"].gather(pos),
            "ops": [1, 2, 3, 4, 5, 6],
            "time_ns": [10, 20, 30, 40, 50, 60],
            "first_start_ns": [1, 12, 21, 22, 3, 55],
            "last_end_ns": [99, 50, 25, 29, 30, 80],
        }
    )
    taken = []
    by_position = range_tree._windows_by_position
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            range_tree, "_windows_by_position", lambda *a: taken.append(1) or by_position(*a)
        )
        ordered = range_tree.instances(placed, forest, 8)
        for shuffled in (placed.reverse(), placed.sample(fraction=1.0, shuffle=True, seed=3)):
            assert_frame_equal(range_tree.instances(shuffled, forest, 8), ordered)
    assert len(taken) == 3
    assert ordered.filter(pos=0)["inclusive_ops"].to_list() == [10]  # 1 + 2 + 3 + 4
