"""A single-process export read in time windows (nsysmap.sources.by_window) gives the tables of a
whole read: every written table, op ids and range ids aside (tests/window_tables.py)."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from devtools.synth.bulk import bulk_tables, write_export
from devtools.synth.tile import gpt_tables
from nsysmap.attribution.rules import BUILTIN
from nsysmap.core.timings import Stages
from nsysmap.flow import run_stages as flow
from nsysmap.flow.run_stages import Settings
from nsysmap.flow.verbs import analyse, analyse_file, load_profile
from nsysmap.output.ops_sinks import HoldOps
from nsysmap.read.nsys import window_cuts
from nsysmap.read.nsys.nsys_frames import PUSH_POP
from nsysmap.read.nsys.nsys_sqlite import open_export, read_sqlite
from nsysmap.read.nsys.row_window import RowWindow
from nsysmap.sources import choose
from nsysmap.sources.by_process import merged_profile
from nsysmap.sources.by_window import CUT_RULES, Plan, WindowCheck, window_profiles
from nsysmap.sources.choose import WINDOWS_ENV, Source
from tests.window_tables import differences, windows_read_apart

pytestmark = pytest.mark.slow  # whole-pipeline runs, twice each
QUIET = Stages(progress=False)
BIG = 1 << 62


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GPT-2-like training export of one process: step, phase and module ranges,
    backward on an autograd thread linked to forward by sequence numbers, NCCL."""
    folder = tmp_path_factory.mktemp("one")
    return write_export(folder / "one.sqlite", gpt_tables(3000, seed=3, processes=1))


def _both(path: Path, out: Path, monkeypatch: pytest.MonkeyPatch, windows: int) -> list[str]:
    """`path` attributed whole and in `windows` windows: the tables that differ."""
    monkeypatch.delenv(WINDOWS_ENV, raising=False)
    analyse_file(path, out / "whole", stages=QUIET)
    monkeypatch.setenv(WINDOWS_ENV, str(windows))
    split = analyse_file(path, out / "split", stages=QUIET)
    assert split.profile.meta_value("windows_refused") is None
    assert split.profile.meta_value("windows_read_apart") == str(windows)
    return differences(out / "whole", out / "split")


def test_windows_give_the_tables_of_the_whole(one_process, tmp_path, monkeypatch):
    assert _both(one_process, tmp_path, monkeypatch, 4) == []
    ops = pl.read_parquet(tmp_path / "split" / "ops.parquet")
    assert ops["op_id"].is_unique().all()
    # The export exercises what crosses a window's edge when it is cut carelessly:
    # backward work credited to the main thread's ranges and linked by sequence number.
    assert ops["other_thread_range_id"].is_not_null().sum() > 1000
    assert ops.filter(pl.col("direction") == "backward")["step"].n_unique() > 4


def _plan(path: Path, monkeypatch: pytest.MonkeyPatch, windows: int) -> Plan:
    monkeypatch.setenv(WINDOWS_ENV, str(windows))
    plan = windows_read_apart(path, None)
    assert plan is not None and plan.refused is None
    return plan


def test_no_sequence_number_crosses_an_edge_and_open_ranges_are_read_on_both_sides(
    one_process, monkeypatch
):
    """Each call and GPU operation is read in exactly one window; no autograd sequence
    number is open across an edge; the ranges open across an edge are read into
    the window after it too (as many as `Plan.carried` says), the others once."""
    plan = _plan(one_process, monkeypatch, 6)
    assert len(plan.windows) == 6
    edges = [w.start_lo for w in plan.windows[1:]]
    with sqlite3.connect(one_process) as db:
        crossing = [
            db.execute(
                "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND start < ? "
                "AND coalesce(end, ?) >= ?",
                (edge, BIG, edge),
            ).fetchone()[0]
            for edge in edges
        ]
        names = db.execute(
            "SELECT coalesce(text, s.value), start, end FROM NVTX_EVENTS "
            "LEFT JOIN StringIds s ON s.id = textId WHERE eventType IN (59, 60)"
        ).fetchall()
    assert list(plan.carried) == [0, *crossing]
    seqs = pl.DataFrame(names, schema=["name", "start", "end"], orient="row").select(
        "start", "end", seq=pl.col("name").str.extract(r"seq = (\d+)", 1)
    )
    spans = seqs.drop_nulls("seq").group_by("seq").agg(pl.col("start").min(), pl.col("end").max())
    assert spans.height > 100
    for edge in edges:
        assert spans.filter((pl.col("start") < edge) & (pl.col("end") >= edge)).is_empty()
    whole = read_sqlite(one_process)
    parts = [read_sqlite(one_process, process=plan.pid, window=w) for w in plan.windows]
    for table in ("api_calls", "ops"):
        assert sum(getattr(p, table).height for p in parts) == getattr(whole, table).height
    ranges = sum(p.ranges.height for p in parts)
    assert ranges == whole.ranges.height + sum(crossing)
    assert plan.ops == whole.ops.height


def _careless(path: Path, plan: Plan, cuts: list[int]) -> Plan:
    """`plan` with windows cut at `cuts`, whatever is open there."""
    bounds: list[int | None] = [None, *cuts, None]
    windows = [RowWindow(lo, hi, 0, BIG) for lo, hi in itertools.pairwise(bounds)]
    return Plan(plan.pid, windows, plan.ops, plan.autograd, plan.nodes)


def test_an_edge_inside_ranges_changes_by_range_and_is_refused(one_process, monkeypatch):
    """Cut in the middle of steps without reading the ranges open across the edges
    into the window after them, those ranges would be lost to the work after it:
    by_range differs from the whole read's. The check refuses such windows (the
    windows on the two sides of an edge disagree on what is open across it), and
    the flow reads the export whole."""
    plan = _plan(one_process, monkeypatch, 3)
    whole = load_profile(one_process)
    calls = whole.api_calls["start_ns"].sort()
    careless = _careless(one_process, plan, [calls[calls.len() * i // 3] for i in (1, 2)])
    expected = analyse(whole).summaries.tables()["by_range"]

    def attributed(check: WindowCheck | None) -> flow.Analysis:
        source = Source(
            window_profiles(open_export(one_process), careless, stages=QUIET, check=check),
            apart=True,
            merged=merged_profile,
            check=check,
            fallback=lambda reason: choose.whole(load_profile(one_process)),
        )
        return flow.flow(source, lambda _: HoldOps(), Settings(BUILTIN))

    unchecked = attributed(None).summaries.tables()["by_range"]
    assert not unchecked.equals(expected)
    check = WindowCheck(careless.ops, careless.autograd, careless.nodes)
    checked = attributed(check)
    assert check.refused is not None and "not read on both sides" in check.refused
    assert checked.summaries.tables()["by_range"].equals(expected)


def test_the_budget_chooses_the_windows(one_process, tmp_path, monkeypatch):
    monkeypatch.delenv(WINDOWS_ENV, raising=False)
    assert windows_read_apart(one_process, None) is None  # fits in memory
    plan = windows_read_apart(one_process, memory_gb=1e-6)
    found = window_cuts.segments(open_export(one_process), 4100, CUT_RULES)
    assert isinstance(found, window_cuts.Segments) and len(found.cuts) >= 5
    assert plan is not None and plan.refused is None
    # A budget far too small: a window per stretch of calls between candidate cuts.
    assert len(plan.windows) == found.calls.filter(pl.col("calls") > 0).height
    two = write_export(tmp_path / "two.sqlite", gpt_tables(600, seed=1, processes=2))
    assert windows_read_apart(two, memory_gb=1e-6) is None  # read one process at a time
    monkeypatch.setenv(WINDOWS_ENV, "1")
    assert windows_read_apart(one_process, memory_gb=1e-6) is None  # forced: whole


def test_an_export_with_a_range_left_open_from_the_start_is_read_whole(tmp_path, monkeypatch):
    """A range left open is closed at its thread's last event, which a window before
    that would not see: no cut may cross it, so the export is read whole, saying why."""
    tables = bulk_tables(400)
    nvtx = tables["NVTX_EVENTS"]
    around = nvtx.head(1).with_columns(
        start=pl.lit(0, pl.Int64), end=pl.lit(None, pl.Int64), text=pl.lit("run")
    )
    tables["NVTX_EVENTS"] = pl.concat([around, nvtx])
    path = write_export(tmp_path / "bulk.sqlite", tables)
    monkeypatch.setenv(WINDOWS_ENV, "3")
    plan = windows_read_apart(path, None)
    assert plan is not None and plan.refused is not None and "range left open" in plan.refused
    analysis = analyse_file(path, tmp_path / "out", stages=QUIET)
    assert analysis.profile.meta_value("windows_refused") == plan.refused
    assert analysis.profile.meta_value("windows_read_apart") is None


def test_windows_the_check_refuses_are_read_whole(one_process, tmp_path, monkeypatch):
    monkeypatch.setattr(WindowCheck, "refusal", lambda self: "refused for the test")
    monkeypatch.setenv(WINDOWS_ENV, "3")
    analysis = analyse_file(one_process, tmp_path / "split", stages=QUIET)
    assert analysis.profile.meta_value("windows_refused") == "refused for the test"
    assert analysis.profile.meta_value("windows_read_apart") is None
    monkeypatch.delenv(WINDOWS_ENV)
    analyse_file(one_process, tmp_path / "whole", stages=QUIET)
    assert differences(tmp_path / "whole", tmp_path / "split") == []


def _block(**columns: list[object]) -> pl.DataFrame:
    n = len(next(iter(columns.values())))
    base: dict[str, list[object]] = {
        "step": [0] * n,
        "step_source": ["range"] * n,
        "phase": ["forward"] * n,
        "phase_source": ["range"] * n,
        "direction": [None] * n,
        "attribution": ["range"] * n,
        "tid": [1] * n,
    }
    strings = {c: pl.String for c in base if c not in ("step", "tid")}
    schema = {"step": pl.Int64, "tid": pl.Int64, **strings}
    return pl.DataFrame({**base, **columns}, schema=schema)


@pytest.mark.parametrize(
    ("chunks", "reason"),
    [
        ([_block(step_source=["records"])], "records"),
        ([_block(attribution=["no_launch"])], "without a launch call"),
        ([_block(step=[None], phase=["backward"]), _block(step=[None])], "outside every step"),
        ([_block(step=[None], tid=[7]), _block(step=[None])], "outside every step"),
        ([_block(step=[None], step_source=[None], direction=["backward"])], "without step ranges"),
        ([_block(step=[0]), _block(step=[1])], None),
        ([_block(step=[None]), _block(step=[None])], None),  # no backward work outside steps
        # records could phase work outside steps by backward work they do not show
        ([_block(step=[None], phase=[None]), _block(step=[None])], "outside every step"),
    ],
)
def test_the_check_names_what_would_differ(chunks, reason):
    check = WindowCheck(ops=sum(b.height for b in chunks), autograd=(7,))
    for chunk in chunks:
        check.next_part()
        check.chunk(chunk)
    found = check.refusal()
    assert (found is None) if reason is None else (found is not None and reason in found)


def test_backward_work_is_possible_without_step_ranges_where_autograd_has_a_thread():
    """Steps from PyTorch's records need backward work: with no autograd thread and no
    backward row, a process without step ranges is exact in windows."""
    alone = _block(step=[None], step_source=[None])
    for autograd, refused in (((), False), ((7,), True)):
        check = WindowCheck(ops=1, autograd=autograd)
        check.next_part()
        check.chunk(alone)
        assert (check.refusal() is not None) == refused


def test_a_row_lost_or_read_twice_is_refused():
    check = WindowCheck(ops=3)
    check.next_part()
    check.chunk(_block(step=[0, 0]))
    assert check.refusal() == "2 rows of GPU work read in windows, 3 in the export"


def test_ranges_open_across_a_cut_are_counted():
    spans = pl.DataFrame({"lo": [0, 5, 20, 30, 30], "hi": [10, 8, 25, 31, 40]})
    times = pl.Series([0, 5, 8, 9, 10, 11, 20, 31, 40, 41])
    # lo < t <= hi: a launch at a range's end is inside it, one at its start is not
    # open across a cut there (the range is wholly after the cut).
    assert window_cuts.open_across(times, spans).to_list() == [0, 1, 2, 1, 1, 0, 0, 2, 1, 0]


def test_the_comparison_sees_one_changed_value(one_process, tmp_path, monkeypatch):
    monkeypatch.delenv(WINDOWS_ENV, raising=False)
    analyse_file(one_process, tmp_path / "a", stages=QUIET)
    analyse_file(one_process, tmp_path / "b", stages=QUIET)
    assert differences(tmp_path / "a", tmp_path / "b") == []
    changed = pl.read_parquet(tmp_path / "b" / "by_range.parquet")
    changed = changed.with_columns(pl.col("calls") + (pl.int_range(pl.len()) == 3))
    changed.write_parquet(tmp_path / "b" / "by_range.parquet")
    assert differences(tmp_path / "a", tmp_path / "b") == ["by_range.parquet"]


def _nvtx_batch(names: list[str], first_row: int) -> pl.DataFrame:
    """NVTX rows as the planning's scan gives them: push/pop ranges named inline."""
    n = len(names)
    return pl.DataFrame(
        {
            "start": [10 * i for i in range(n)],
            "end": [10 * i + 5 for i in range(n)],
            "eventType": [PUSH_POP] * n,
            "textId": [None] * n,
            "rowid": list(range(first_row, first_row + n)),
            "text": names,
        },
        schema_overrides={"textId": pl.Int64},
    )


def test_a_range_naming_an_autograd_node_is_looked_for_until_a_batch_has_one():
    strings = pl.DataFrame(schema={"id": pl.Int64, "value": pl.String})
    raised: set[int] = set()

    def nodes(names: list[str], first_row: int) -> int:
        reduced = window_cuts._reduced(_nvtx_batch(names, first_row), strings, CUT_RULES, raised)
        return reduced.filter(pl.col("kind") == window_cuts._NODE).height

    assert nodes(["aten::mm, seq = 1", "forward"], 0) == 0 and not raised
    assert nodes(["autograd::engine::evaluate_function: MmBackward0"], 10) == 1
    assert raised == {window_cuts._NODE}
    assert nodes(["MmBackward0, stashed seq = 1"], 20) == 0  # raised: not looked for again


def test_the_plan_says_where_ranges_name_autograd_nodes(one_process, tmp_path):
    """Found whichever batch holds them; not found where none does."""
    found = window_cuts.segments(open_export(one_process), 4100, CUT_RULES)
    assert isinstance(found, window_cuts.Segments) and found.nodes
    plain = tmp_path / "no_nodes.sqlite"
    plain.write_bytes(one_process.read_bytes())
    with sqlite3.connect(plain) as db:
        db.execute("UPDATE NVTX_EVENTS SET text = 'range' WHERE text LIKE '%Backward%'")
        db.execute("UPDATE NVTX_EVENTS SET text = 'range' WHERE text LIKE '%stashed seq%'")
    db.close()
    bare = window_cuts.segments(open_export(plain), 4100, CUT_RULES)
    assert isinstance(bare, window_cuts.Segments) and not bare.nodes
