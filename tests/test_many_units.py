"""The pieces of nsysmap.many on hand-checkable inputs: inputs, ranks, overlap, cross-rank
tables, cluster sizing, progress, and the launch-environment rank."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from nsysmap.core.errors import InputNotFound
from nsysmap.many import cross_rank as across
from nsysmap.many.cluster import BASE_TASK_BYTES, plan_local
from nsysmap.many.input_files import expand_inputs
from nsysmap.many.progress import Progress, progress_line
from nsysmap.many.rank_ids import DECLARED, FILE_ORDER, PROCESS, assign_ranks
from nsysmap.many.rank_overlap import exposed_communication
from nsysmap.many.task import FAILED, OK, Outcome, Unit, by_device_owner
from nsysmap.read.nsys.nsys_env import rank_facts
from tests.cli_runner import invoke

GiB = 1 << 30


# ------------------------------------------------------------------ inputs
def _touch(directory: Path, *names: str) -> None:
    for name in names:
        (directory / name).write_bytes(b"x")


def test_directory_lists_reports_in_natural_order(tmp_path: Path) -> None:
    _touch(tmp_path, "rank10.sqlite", "rank2.sqlite", "rank1.json.gz", "manifest.json", "notes.txt")
    _touch(tmp_path, "rank3.nsys-rep", "rank2.nsys-rep")  # rank2 is exported already
    names = [p.name for p in expand_inputs([tmp_path])]
    assert names == ["rank1.json.gz", "rank2.sqlite", "rank3.nsys-rep", "rank10.sqlite"]


def test_globs_files_and_duplicates(tmp_path: Path) -> None:
    _touch(tmp_path, "a1.sqlite", "a2.sqlite", "b.sqlite")
    found = expand_inputs(
        [str(tmp_path / "a*.sqlite"), tmp_path / "b.sqlite", tmp_path / "a1.sqlite"]
    )
    assert [p.name for p in found] == ["a1.sqlite", "a2.sqlite", "b.sqlite"]


@pytest.mark.parametrize("pattern", ["missing.sqlite", "none*.sqlite"])
def test_nothing_found_is_an_input_error(tmp_path: Path, pattern: str) -> None:
    with pytest.raises(InputNotFound):
        expand_inputs([tmp_path / pattern])
    with pytest.raises(InputNotFound, match="no reports in this directory"):
        expand_inputs([tmp_path])


# ------------------------------------------------------------------- ranks
def _ok(index: int, pids: list[int], rank: str | None = None) -> Outcome:
    units = tuple(Unit(pid, (i,), 10, 100, f"p{pid}") for i, pid in enumerate(pids))
    meta = {} if rank is None else {"rank": rank}
    return Outcome(index, f"/r/rank{index}.sqlite", OK, units=units, meta=meta)


def _bad(index: int) -> Outcome:
    return Outcome(index, f"/r/rank{index}.sqlite", FAILED, "broken", 4)


def _ranks(outcomes: list[Outcome]) -> list[tuple[int, int, int, str]]:
    ranks, _ = assign_ranks(outcomes)
    return [(r.rank, r.index, r.unit.pid, r.source) for r in ranks]


def test_declared_ranks_are_used_when_all_distinct() -> None:
    outcomes = [_ok(0, [7], "2"), _ok(1, [8], "0"), _bad(2), _ok(3, [9], "1")]
    assert _ranks(outcomes) == [(0, 1, 8, DECLARED), (1, 3, 9, DECLARED), (2, 0, 7, DECLARED)]


def test_repeated_declared_rank_falls_back_to_input_order() -> None:
    outcomes = [_ok(0, [7], "0"), _ok(1, [8], "0")]
    ranks, rule = assign_ranks(outcomes)
    assert [(r.rank, r.source, r.declared) for r in ranks] == [
        (0, FILE_ORDER, 0),
        (1, FILE_ORDER, 0),
    ]
    assert "both declare rank 0" in rule


def test_processes_and_failed_inputs_take_numbers_in_order() -> None:
    outcomes = [_ok(0, [5, 6]), _bad(1), _ok(2, [9], "4")]
    assert _ranks(outcomes) == [(0, 0, 5, PROCESS), (1, 0, 6, PROCESS), (3, 2, 9, FILE_ORDER)]


# ----------------------------------------------------------------- overlap
def test_exposed_communication_by_hand() -> None:
    # device 0: compute [0, 10) on stream 7, all-reduces [5, 15) and [12, 20) on streams 20
    # and 21, a copy [15, 20) (no compute); device 1: an all-reduce alone [0, 4); and a
    # warm-up all-reduce [30, 40) on device 0, left out
    ops = pl.DataFrame(
        {
            "pid": [1, 1, 1, 1, 1, 1],
            "kind": ["kernel", "kernel", "kernel", "kernel", "memcpy", "kernel"],
            "device_id": [0, 0, 0, 1, 0, 0],
            "stream_id": [7, 20, 21, 20, 8, 20],
            "start_ns": [0, 5, 12, 0, 15, 30],
            "end_ns": [10, 15, 20, 4, 20, 40],
            "category": ["gemm", *["communication"] * 3, "memcpy", "communication"],
            "warmup": [False, False, False, None, False, True],
        }
    ).with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns"))
    got = exposed_communication(ops.lazy()).row(0, named=True)
    # busy [5, 20) + [0, 4) = 19; each kernel its own time: hidden [5, 10) = 5;
    # exposed [10, 15) + [12, 20) + [0, 4) = 17, so hidden + exposed = 10 + 8 + 4
    assert got == {"pid": 1, "comm_busy_ns": 19, "overlapped_ns": 5, "exposed_ns": 17}


# ------------------------------------------------------------------- waits
def test_waits_rows_go_to_the_process_whose_gpu_it_is() -> None:
    """Per-device tables (the waits) are parted by device: process 7 drives GPUs 0 and 2,
    process 5 GPU 1 and, shared, GPU 2 again (its rows stay with process 7, listed first)."""
    units = (Unit(7, (0, 2), 1, 1, "a"), Unit(5, (1, 2), 1, 1, "b"))
    idle = pl.DataFrame({"device_id": [2, 0, 1, 2], "gap_ns": [1, 2, 3, 4]})
    got = by_device_owner({"idle": idle}, units)["idle"]
    assert got.columns == ["pid", "device_id", "gap_ns"]
    assert got.rows() == [(7, 2, 1), (7, 0, 2), (5, 1, 3), (7, 2, 4)]


# ------------------------------------------------------------ across ranks
STEPS = pl.DataFrame(
    {
        "rank": [0, 1, 2, 0, 1, 2],
        "step": [0, 0, 0, 1, 1, 1],
        "ops": [1] * 6,
        "time_ns": [100, 100, 100, 100, 100, 100],
        "comm_ns": [30, 10, 20, 30, 10, 20],
        "first_start_ns": [0, 0, 0, 200, 200, 200],
        "last_end_ns": [150, 150, 150, 350, 350, 350],
    }
)


def test_rank_steps_and_stragglers() -> None:
    per_step = across.rank_steps(STEPS)
    first = per_step.filter(pl.col("step") == 0)
    assert first["collective_wait_ns"].to_list() == [20, 0, 10]
    assert first["compute_ns"].to_list() == [70, 90, 80]
    assert per_step["span_ns"].unique().to_list() == [150]
    worst = across.stragglers(per_step).row(0, named=True)
    assert (worst["slowest_rank"], worst["fastest_rank"], worst["straggler_cost_ns"]) == (1, 0, 20)
    assert (worst["slowest_compute_ns"], worst["median_compute_ns"]) == (90, 80.0)
    overlap = pl.DataFrame(
        {"rank": [1], "comm_busy_ns": [20], "overlapped_ns": [5], "exposed_ns": [15]}
    )
    comm = across.rank_comm(per_step, overlap, [0, 1, 2, 3])
    assert comm["collective_wait_ns"].to_list() == [40, 0, 20, 0]
    assert comm["exposed_ns"].to_list() == [0, 15, 0, 0]  # ranks without communication: 0
    # rank 3 has no step (all its work was warm-up): listed, every figure 0
    assert comm.row(3) == (3, *[0] * (comm.width - 1))


def test_module_spread_counts_missing_ranks_as_zero() -> None:
    by_module_phase = pl.DataFrame(
        {
            "rank": [0, 1, 0],
            "module": ["a", "a", None],
            "module_class": ["L", "L", None],
            "phase": ["forward", "forward", None],
            "time_ns": [10, 40, 5],
        }
    )
    spread = across.rank_module_phase(by_module_phase, [0, 1, 2])
    a = spread.filter(pl.col("module") == "a").row(0, named=True)
    assert (a["min_ns"], a["median_ns"], a["max_ns"], a["slowest_rank"]) == (0, 10.0, 40, 1)
    assert (a["fastest_rank"], a["excess_ns"], a["ranks"]) == (2, 30.0, 3)
    none = spread.filter(pl.col("module").is_null()).row(0, named=True)
    assert (none["max_ns"], none["slowest_rank"], none["median_ns"]) == (5, 0, 0.0)


# ----------------------------------------------------------------- cluster
def test_local_cluster_fits_memory_and_cores() -> None:
    # 8 reports of 1 GiB: 3 GiB + base each; 10 GiB available, 80% usable = 8 GiB: 2 fit
    plan = plan_local([GiB] * 8, cpus=16, available_bytes=10 * GiB)
    assert (plan.workers, plan.threads_per_worker, plan.polars_threads) == (2, 1, 8)
    assert plan.memory_limit_bytes == 4 * GiB
    small = plan_local([1 << 20] * 3, cpus=16, available_bytes=100 * GiB)
    assert small.workers == 3  # no more workers than reports
    tight = plan_local([GiB * 100], cpus=4, available_bytes=GiB)
    assert tight.workers == 1 and tight.memory_limit_bytes == 300 * GiB + BASE_TASK_BYTES


def test_given_shape_is_kept() -> None:
    plan = plan_local([1], cpus=4, available_bytes=8 * GiB, workers=3, threads_per_worker=2)
    assert (plan.workers, plan.threads_per_worker, plan.polars_threads) == (3, 2, 1)
    limited = plan_local([1], cpus=4, available_bytes=8 * GiB, workers=2, memory_limit_bytes=123)
    assert limited.memory_limit_bytes == 123


# ---------------------------------------------------------------- progress
def test_progress_line_names_the_slowest_running_report() -> None:
    line = progress_line(5, 1, 16, {"rank07.sqlite": 12.4, "rank09.sqlite": 3.0})
    assert line == "nsysmap: 5/16 reports done, 1 failed; slowest running: rank07.sqlite 12 s"
    assert progress_line(16, 0, 16, {}) == "nsysmap: 16/16 reports done"
    hostile = progress_line(1, 0, 2, {"r\x1b]0;title\x07.sqlite": 1.0})
    assert hostile.endswith("slowest running: r\\x1b]0;title\\x07.sqlite 1 s")


def test_progress_is_silent_off_a_terminal() -> None:
    import io

    stream = io.StringIO()
    with Progress(2, lambda: {"a": 1.0}, stream=stream) as progress:
        progress.finished(True)
        progress.finished(False)
    assert (progress.done, progress.failed) == (2, 1)
    assert stream.getvalue() == ""


# ---------------------------------------------------------- launch environment
def test_rank_from_launch_environment() -> None:
    rows = ['PATH="/usr/bin"', 'LOCAL_RANK="1"', 'SLURM_PROCID="3"', 'RANK="9"', 'WORLD_SIZE="16"']
    env = pl.DataFrame({"name": ["PROCESS_0:ENVIRONMENT_VARIABLE"] * len(rows), "value": rows})
    assert rank_facts(env) == {"rank": "9", "world_size": "16", "rank_variable": "RANK"}
    assert rank_facts(env.filter(~pl.col("value").str.starts_with("RANK"))) == {
        "rank": "3",
        "world_size": "16",
        "rank_variable": "SLURM_PROCID",
    }
    assert rank_facts(None) == {"rank": None, "world_size": None, "rank_variable": None}


# --------------------------------------------------------------------- CLI
def test_cluster_options_need_several_reports(tmp_path: Path) -> None:
    report = tmp_path / "one.sqlite"
    report.write_bytes(b"x")
    code, _, err = invoke(["attribute", str(report), "--workers", "2"])
    assert code == 2 and "apply to several reports" in err
