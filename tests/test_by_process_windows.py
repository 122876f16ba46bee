"""An export of several processes, each too large for the memory budget whole, read one
process at a time and each process in time windows (nsysmap.sources.choose): the tables of
a whole read, and where a process cannot be cut exactly, every process read whole one at a
time, saying why."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest

from devtools.synth.bulk import write_export
from devtools.synth.tile import gpt_tables, with_ranges
from nsysmap.core import memory
from nsysmap.core.timings import Stages
from nsysmap.flow.verbs import analyse_file
from nsysmap.read.nsys import nsys_sqlite
from nsysmap.read.nsys.nsys_sqlite import open_export
from nsysmap.sources import choose
from nsysmap.sources.by_window import Plan, ProcessChecks, WindowCheck, window_plan
from nsysmap.sources.choose import BY_PROCESS, WINDOWS_ENV, Choice, choice
from tests.test_by_window import _block
from tests.window_tables import differences

QUIET = Stages(progress=False)
TINY = 1e-6  # GB: every process over the budget
STEP = r"^nsysmap:step:\d+$"


def _with_runs(tables: dict) -> dict:
    """`tables` with a range `run` on each process's main thread around all its steps:
    open across every cut, so that each window of each process carries it."""
    nvtx = tables["NVTX_EVENTS"]
    nvtx = nvtx if isinstance(nvtx, pl.DataFrame) else pl.concat(list(nvtx))
    steps_ids = tables["StringIds"].filter(pl.col("value").str.contains(STEP))["id"]
    steps = nvtx.filter(pl.col("textId").is_in(steps_ids.implode()).fill_null(False))
    spans = steps.group_by("globalTid").agg(first=pl.col("start").min(), last=pl.col("end").max())
    tables = {**tables, "NVTX_EVENTS": nvtx}  # read once (it may be a generator)
    for tid, first, last in spans.sort("globalTid").iter_rows():
        run = pl.DataFrame({"start": [first - 10], "end": [last + 10], "text": ["run"]})
        tables = with_ranges(tables, run, tid)
    return tables


def _with_small_process(path: Path, kept: float = 0.05) -> Path:
    """The export `path` with the second process's rows after the first `kept` of its
    time left out: a process with little GPU work beside a large one."""
    pid = sorted(nsys_sqlite.gpu_processes(path) or [])[1]
    with sqlite3.connect(path) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        columns = {t: {r[1] for r in db.execute(f'PRAGMA table_info("{t}")')} for t in tables}
        owner = {
            t: next((c for c in ("globalPid", "globalTid") if c in columns[t]), None)
            for t in tables
        }
        mine = {t: f'(("{c}" >> 24) & 16777215) = {pid}' for t, c in owner.items() if c}
        timed = [t for t in mine if "start" in columns[t]]
        first, last = db.execute(
            f'SELECT min(start), max(start) FROM "{timed[0]}" WHERE {mine[timed[0]]}'
        ).fetchone()
        cut = first + int(kept * (last - first))
        for table in timed:
            db.execute(f'DELETE FROM "{table}" WHERE {mine[table]} AND start > {cut}')
    return path


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GPT-2-like data-parallel export: two processes, each with step, phase and
    module ranges, a range around its whole run, backward work on an autograd
    thread, NCCL."""
    folder = tmp_path_factory.mktemp("two")
    tables = _with_runs(gpt_tables(2400, seed=4, processes=2))
    return write_export(folder / "two.sqlite", tables)


def _whole(path: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(WINDOWS_ENV, raising=False)
    analyse_file(path, out, stages=QUIET, memory_gb=1000.0)
    return out


@pytest.mark.slow
def test_each_process_in_windows_gives_the_tables_of_the_whole(
    two_processes, tmp_path, monkeypatch
):
    whole = _whole(two_processes, tmp_path / "whole", monkeypatch)
    monkeypatch.setenv(WINDOWS_ENV, "3")
    found = choice(two_processes, TINY)
    assert found.how == BY_PROCESS and len(found.processes) == 2 and found.windows == 3
    for pid in found.processes:  # each process's `run` is carried across its cuts
        plan = window_plan(open_export(two_processes), pid, 3)
        assert len(plan.windows) == 3 and all(n > 0 for n in plan.carried[1:])
    split = analyse_file(two_processes, tmp_path / "split", stages=QUIET, memory_gb=TINY)
    meta = split.profile.meta_value
    assert meta("windows_refused") is None
    assert (meta("processes_read_apart"), meta("windows_read_apart")) == ("2", "6")
    assert differences(whole, tmp_path / "split") == []
    ops = pl.read_parquet(tmp_path / "split" / "ops.parquet")
    # Work credited to another thread's ranges, in both processes.
    crossing = ops.filter(pl.col("other_thread_range_id").is_not_null())
    assert crossing["pid"].n_unique() == 2 and ops["op_id"].is_unique().all()
    runs = pl.read_parquet(tmp_path / "split" / "by_range.parquet").filter(range_name="run")
    assert runs["calls"].to_list() == [1, 1]  # one instance per process, carried or not


@pytest.mark.slow
def test_windows_the_checks_refuse_are_read_a_process_at_a_time(
    two_processes, tmp_path, monkeypatch
):
    whole = _whole(two_processes, tmp_path / "whole", monkeypatch)
    refused = iter([None, "refused for the test"])  # the second process's check refuses
    monkeypatch.setattr(WindowCheck, "refusal", lambda self: next(refused, None))
    monkeypatch.setenv(WINDOWS_ENV, "3")
    split = analyse_file(two_processes, tmp_path / "split", stages=QUIET, memory_gb=TINY)
    meta = split.profile.meta_value
    assert meta("windows_refused") == "refused for the test"
    assert (meta("processes_read_apart"), meta("windows_read_apart")) == ("2", None)
    assert differences(whole, tmp_path / "split") == []


@pytest.mark.slow
def test_a_refusal_midway_lets_go_of_the_windows_before_reading_again(
    two_processes, tmp_path, monkeypatch
):
    """A check that refuses at the first chunk stops the windows there: the paused
    source is closed (its window let go) before every process is read whole."""
    whole = _whole(two_processes, tmp_path / "whole", monkeypatch)

    def refuse(self, chunk):
        self.seen += chunk.height
        self.refused = "refused at once"

    closed: list[bool] = []
    made = choose.normalised_parts

    def watched(parts, stages):
        try:
            yield from made(parts, stages)
        finally:
            closed.append(True)

    read_whole = choose._by_process

    def by_process(*args, **kwargs):
        assert closed == [True]  # let go before the processes are read again
        return read_whole(*args, **kwargs)

    monkeypatch.setattr(WindowCheck, "chunk", refuse)
    monkeypatch.setattr(choose, "normalised_parts", watched)
    monkeypatch.setattr(choose, "_by_process", by_process)
    monkeypatch.setenv(WINDOWS_ENV, "3")
    split = analyse_file(two_processes, tmp_path / "split", stages=QUIET, memory_gb=TINY)
    assert split.profile.meta_value("windows_refused") == "refused at once"
    assert differences(whole, tmp_path / "split") == []


@pytest.mark.slow
def test_a_process_that_cannot_be_cut_is_read_whole_and_the_others_in_windows(
    two_processes, tmp_path, monkeypatch
):
    planned = choose.window_plan
    first, second = choice(two_processes, TINY).processes

    def plan(export, pid, count):  # the second process cannot be cut exactly
        return planned(export, pid, count) if pid == first else Plan(pid, [], 0, refused="no cut")

    whole = _whole(two_processes, tmp_path / "whole", monkeypatch)
    monkeypatch.setattr(choose, "window_plan", plan)
    monkeypatch.setenv(WINDOWS_ENV, "3")
    split = analyse_file(two_processes, tmp_path / "split", stages=QUIET, memory_gb=TINY)
    meta = split.profile.meta_value
    assert meta("windows_refused") == f"process {second}: no cut"
    # The first process in 3 windows, the second whole: 4 parts.
    assert (meta("processes_read_apart"), meta("windows_read_apart")) == ("2", "4")
    assert differences(whole, tmp_path / "split") == []


@pytest.mark.slow
def test_no_process_that_can_be_cut_reads_every_process_whole(two_processes, tmp_path, monkeypatch):
    whole = _whole(two_processes, tmp_path / "whole", monkeypatch)
    monkeypatch.setattr(choose, "window_plan", lambda e, pid, n: Plan(pid, [], 0, refused="no"))
    monkeypatch.setenv(WINDOWS_ENV, "3")
    split = analyse_file(two_processes, tmp_path / "split", stages=QUIET, memory_gb=TINY)
    meta = split.profile.meta_value
    pids = choice(two_processes, TINY).processes
    assert meta("windows_refused") == "; ".join(f"process {pid}: no" for pid in pids)
    assert (meta("processes_read_apart"), meta("windows_read_apart")) == ("2", None)
    assert differences(whole, tmp_path / "split") == []


@pytest.mark.slow
def test_a_process_with_little_work_is_read_whole_beside_the_others_windows(tmp_path, monkeypatch):
    """Each process's windows follow its share of the GPU work: a process with a
    twentieth of it, under the budget alone, is read whole."""
    path = _with_small_process(write_export(tmp_path / "uneven.sqlite", gpt_tables(2400, seed=5)))
    rows = nsys_sqlite.gpu_process_rows(path)
    assert rows is not None and len(rows) == 2
    need = nsys_sqlite.expected_bytes(path)
    budget = 0.5 * need / 1e9  # the large process over it, the small one under
    found = choice(path, budget)
    small = min(rows, key=lambda pid: rows[pid])
    assert found.how == BY_PROCESS and found.each[found.processes.index(small)] == 0
    assert max(found.each) >= 2
    whole = _whole(path, tmp_path / "whole", monkeypatch)
    split = analyse_file(path, tmp_path / "split", stages=QUIET, memory_gb=budget)
    meta = split.profile.meta_value
    assert meta("windows_refused") is None and meta("processes_read_apart") == "2"
    assert int(meta("windows_read_apart") or 0) == max(found.each) + 1
    assert differences(whole, tmp_path / "split") == []


def test_each_process_is_checked_on_its_own():
    """Work outside every step with a backward phase, in one window of each process: no
    process has it in two windows, so nothing differs from a whole read; in two windows
    of one process, it would (steps and phases never cross processes)."""
    outside = _block(step=[None], phase=["backward"])
    for windows, refused in (([2, 2], False), ([3, 1], True)):
        checks = [WindowCheck(ops=windows[0]), WindowCheck(ops=windows[1])]
        parts = ProcessChecks(checks, windows)
        for _ in range(4):  # the first window of each process holds the work
            parts.next_part()
            parts.chunk(outside if parts.part in (0, 2) else _block(step=[0]))
        found = parts.refusal()
        assert (found is not None and "outside every step" in found) == refused
        assert [c.seen for c in checks] == windows
    with pytest.raises(IndexError):
        parts.next_part()


def test_the_default_budget_is_a_laptops(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 20e9)
    assert memory.split_budget_bytes(None) == memory.LAPTOP_BYTES == 6e9
    monkeypatch.setattr(memory, "available_bytes", lambda: 3e9)
    assert memory.split_budget_bytes(None) == 3e9  # the machine's share, where less
    monkeypatch.setattr(memory, "available_bytes", lambda: None)
    assert memory.split_budget_bytes(None) == 6e9  # nothing known: the laptop's
    assert memory.split_budget_bytes(40.0) == 40e9  # --memory-gb, whatever the machine
    assert memory.budget_bytes(None) is None  # a trace's budget stays the machine's share


def test_a_process_over_the_budget_alone_is_read_in_windows():
    """Without the rows of each process, the processes share the need evenly: windows
    where each one's share is over the budget, twice that share over it, as for one
    process."""
    facts = choose.Facts(True, int(16e9), 6e9, lambda: [1, 2], None)
    assert choose.decide(facts) == Choice(BY_PROCESS, (1, 2), 4, (4, 4))
    facts = choose.Facts(True, int(10e9), 6e9, lambda: [1, 2], None)
    assert choose.decide(facts) == Choice(BY_PROCESS, (1, 2), 0)
