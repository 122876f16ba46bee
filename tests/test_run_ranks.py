"""The parts of a distributed `nsysmap run` that need no torch: rank guard, records, commands.

End-to-end runs of each launch form are in test_run_distributed.py (slow).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from instrument import contract
from instrument import rank_guard as guard
from nsysmap.capture import rank_mode
from nsysmap.capture.distributed import torchrun_command
from nsysmap.capture.job_assemble import JobPlan, JobResult, assemble
from nsysmap.capture.profile_script import RunRequest
from nsysmap.capture.rank_mode import rank_command
from nsysmap.capture.rank_states import (
    RankState,
    failure_line,
    first_failure,
    rank_states,
    window_doubt,
)
from nsysmap.core.errors import ProfilerFailed, ScriptFailed, SomeProfilesFailed
from nsysmap.many import ManyResult
from nsysmap.many.rank_ids import DECLARED, FILE_ORDER, assign_ranks
from nsysmap.many.ranks_text import Findings, job_line, steps_said, straggler_line
from nsysmap.many.task import FAILED, OK, Outcome, Unit
from tests.cli_runner import invoke

TORCHRUN_ENV = {
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "3",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
    "TORCHELASTIC_RUN_ID": "abc",
}


def who(rank: int, world: int = 2, job: str = "job1") -> guard.RankIdentity:
    return guard.RankIdentity(rank, world, rank, job)


def record(rank: int, status: int, ended: float, job: str = "job1", **more) -> dict:
    return {
        "rank": rank,
        "world_size": 3,
        "job": job,
        "exit_status": status,
        "ended_at": ended,
        **more,
    }


def write_record(capture: Path, rank: int, status: int, ended: float, job: str = "job1") -> None:
    directory = contract.rank_dir(capture, rank)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / contract.RANK_RECORD).write_text(json.dumps(record(rank, status, ended, job)))


# ------------------------------------------------------------ who is which rank


def test_the_rank_comes_from_torchruns_environment():
    found = guard.rank_identity(TORCHRUN_ENV)
    assert found is not None
    assert (found.rank, found.world_size, found.local_rank) == (1, 3, 1)
    assert found.job == guard.job_key(TORCHRUN_ENV)
    assert guard.rank_identity(TORCHRUN_ENV, job="given").job == "given"
    assert guard.rank_identity({"WORLD_SIZE": "2"}) is None
    assert guard.rank_identity({**TORCHRUN_ENV, "RANK": "3"}) is None  # RANK < WORLD_SIZE
    assert guard.rank_identity({**TORCHRUN_ENV, "RANK": "x"}) is None


def test_the_job_key_tells_runs_apart_and_is_the_same_on_every_rank():
    key = guard.job_key(TORCHRUN_ENV)
    assert guard.job_key({**TORCHRUN_ENV, "RANK": "0", "LOCAL_RANK": "0"}) == key
    assert guard.job_key({**TORCHRUN_ENV, "MASTER_PORT": "29501"}) != key
    assert guard.job_key({**TORCHRUN_ENV, "TORCHELASTIC_RESTART_COUNT": "1"}) != key


def test_rank_directories_expand_the_environment_as_nsys_does():
    template = f"out/capture/{contract.RANK_DIR_TEMPLATE}/report"
    assert contract.expand_env(template, {"RANK": "7"}) == "out/capture/rank7/report"
    assert contract.expand_env("a%q{NOPE}b%q{RANK}", {"RANK": "0"}) == "ab0"
    assert contract.expand_env("100%q", {}) == "100%q"
    assert contract.rank_dir(Path("c"), 3) == Path("c/rank3")


# ------------------------------------------------------------ the rank guard


def test_the_guard_records_a_status_and_clears_what_a_previous_run_left(tmp_path: Path):
    stale = contract.rank_dir(tmp_path, 0) / contract.TRACE
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    done = guard.supervise([sys.executable, "-c", "raise SystemExit(3)"], tmp_path, who(0))
    assert (done.exit_status, done.signal, done.rank, done.job) == (3, None, 0, "job1")
    assert not stale.exists()
    written = contract.read_rank_record(contract.rank_dir(tmp_path, 0))
    assert written == json.loads(json.dumps(done.to_json()))
    assert written["ended_at"] >= written["started_at"] and written["peak_rss_bytes"] > 0


def test_the_guard_names_the_signal_that_killed_the_rank(tmp_path: Path):
    kill = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    done = guard.supervise([sys.executable, "-c", kill], tmp_path, who(1))
    assert (done.exit_status, done.signal) == (128 + signal.SIGKILL, "SIGKILL")


def test_the_launchers_own_status_wins_over_the_processs():
    assert guard.rank_status({"exit_status": 143}, 1) == 143
    assert guard.rank_status({}, -9) == 137
    assert guard.rank_status({"exit_status": True}, 2) == 2
    assert guard.signal_name(-15) == "SIGTERM" and guard.signal_name(0) is None


def test_a_program_that_cannot_start_is_status_127(tmp_path: Path):
    done = guard.supervise([str(tmp_path / "missing")], tmp_path, who(0))
    assert done.exit_status == 127 and done.pid is None


def test_waiting_ends_when_every_rank_has_a_record_of_this_job(tmp_path: Path):
    write_record(tmp_path, 0, 0, 1.0)
    write_record(tmp_path, 1, 0, 2.0, job="an older run")
    started = time.monotonic()
    found = guard.wait_for_ranks(tmp_path, who(0), grace_s=60, stop=lambda: True)
    assert list(found) == [0]  # stopped: the other record is another job's
    write_record(tmp_path, 1, 0, 2.0)
    found = guard.wait_for_ranks(tmp_path, who(0), grace_s=60)
    assert sorted(found) == [0, 1] and time.monotonic() - started < 5


@pytest.mark.slow
def test_waiting_for_a_missing_rank_ends_a_grace_period_after_a_failure(tmp_path: Path):
    write_record(tmp_path, 0, 137, 1.0)
    started = time.monotonic()
    found = guard.wait_for_ranks(tmp_path, who(0, world=3), grace_s=0.5)
    assert list(found) == [0]
    assert 0.5 <= time.monotonic() - started < 5


def test_the_rank_that_failed_first_leaves_first(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(guard.time, "sleep", slept.append)
    records = {0: record(0, 1, 5.0), 1: record(1, 137, 3.0), 2: record(2, 0, 9.0)}
    assert guard.failed_first(records) == 1
    guard.leave_in_order(records, who(1, 3))
    assert slept == []
    guard.leave_in_order(records, who(0, 3))
    assert slept == [guard.LEAVE_AFTER_S]
    assert guard.failed_first({0: record(0, 0, 1.0)}) is None


def test_the_guard_needs_torchruns_environment(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.delenv("RANK", raising=False)
    assert guard.main(["--capture", str(tmp_path), "--", "true"]) == 2
    assert "RANK" in capsys.readouterr().err


# ------------------------------------------------------------ how the ranks ended


def state(rank: int, status: int | None, ended: float | None = None, **launch) -> RankState:
    said = {} if status is None else {"exit_status": status, "ended_at": ended}
    if "signal" in launch:
        said["signal"] = launch.pop("signal")
    return RankState(rank, said, launch)


def test_the_first_failure_is_named_with_what_ended_it():
    states = [
        state(0, 1, 5.0, exit_status=1, exception="RuntimeError: Connection reset by peer"),
        state(1, 137, 3.0, signal="SIGKILL"),
        state(2, 0, 6.0, exit_status=0),
    ]
    assert first_failure(states) is states[1]
    assert failure_line(states, 3) == (
        "rank 1 of 3 was killed by SIGKILL (status 137); rank 0 failed after it (status 1)"
    )
    assert states[0].how() == "exited with status 1 (RuntimeError: Connection reset by peer)"
    assert states[2].how() == "succeeded"
    assert failure_line([states[2]], 3) is None


def test_an_interrupted_job_is_said_in_one_line():
    states = [
        state(0, 130, 2.0, exit_status=130, interrupted=True),
        state(1, 130, 1.0, exit_status=130, interrupted=True),
        state(2, 1, 3.0, exit_status=1),
    ]
    assert failure_line(states, 3) == (
        "ranks 0 and 1 of 3 were interrupted (status 130); rank 2 failed after it (status 1)"
    )
    assert failure_line(states[1:2], 3) == "rank 1 of 3 was interrupted (status 130)"


def test_a_rank_without_records_comes_after_those_with_one():
    states = [state(0, None), state(1, 143, 8.0, exit_status=143, interrupted=True)]
    assert first_failure(states) is states[1]
    assert states[1].how() == "was interrupted (status 143)"
    assert "left no record" in states[0].how()
    assert failure_line(states, 2).endswith("rank 0 failed after it")


def test_windows_that_start_at_different_steps_are_said():
    same = [state(r, 0, 1.0, exit_status=0, profiled_steps=[1, 3]) for r in range(2)]
    assert window_doubt(same) is None
    late = [*same, state(2, 0, 1.0, exit_status=0, profiled_steps=[2, 4])]
    assert window_doubt(late) == (
        "the ranks profiled different steps (rank 0: steps 1-3; rank 1: steps 1-3; "
        "rank 2: steps 2-4)"
    )
    short = [*same, state(2, 1, 1.0, exit_status=1, profiled_steps=[1, 2])]
    assert window_doubt(short) is None  # a rank that failed stops early


def test_rank_states_read_both_records_of_this_job(tmp_path: Path):
    write_record(tmp_path, 0, 0, 1.0)
    write_record(tmp_path, 1, 0, 1.0, job="other")
    launch = contract.rank_dir(tmp_path, 1) / contract.LAUNCH_RECORD
    launch.write_text(json.dumps({"exit_status": 1, "exception": "ValueError: x"}))
    states = rank_states(tmp_path, [0, 1, 2], "job1")
    assert [s.status for s in states] == [0, 1, None]
    assert states[1].record == {} and states[2].launch == {}


# ------------------------------------------------------------ command lines


def test_every_rank_runs_the_same_command_into_its_own_directory(tmp_path: Path):
    request = RunRequest(Path("train.py"), ("--lr", "1"), steps=2)
    capture, nsys = tmp_path / "capture", Path("/opt/nsys/bin/nsys")
    plain = rank_command(request, "torch", capture, None)
    assert plain[1:] == [
        "-m",
        "instrument.launch",
        "--backend",
        "torch",
        "--out",
        f"{capture}/rank%q{{RANK}}",
        "--steps",
        "2",
        "--",
        "train.py",
        "--lr",
        "1",
    ]
    under_nsys = rank_command(request, "nsys", capture, nsys)
    assert under_nsys[:2] == [str(nsys), "profile"]
    assert f"--output={capture}/rank%q{{RANK}}/report" in under_nsys
    assert under_nsys[-len(plain) :] == [*plain[:4], "nsys", *plain[5:]]
    started = torchrun_command(3, capture, "k", plain)
    assert started[1:13] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        "--nproc-per-node=3",
        "-m",
        "instrument.rank_guard",
        "--capture",
        str(capture),
        "--job",
        "k",
        "--",
    ]
    assert started[13:] == plain


def test_cli_usage_errors_of_the_distributed_options(tmp_path: Path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text("")
    code, _, err = invoke(["run", "--one-nsys-report", str(script)])
    assert code == 2 and "--one-nsys-report applies to --nproc-per-node" in err
    for name, value in TORCHRUN_ENV.items():
        monkeypatch.setenv(name, value)
    code, _, err = invoke(["run", "--nproc-per-node", "2", str(script)])
    assert code == 2 and "under torchrun, leave it out" in err


# ------------------------------------------------------------ ranks of the many path


def outcome(index: int, rank: int | None) -> Outcome:
    meta = {} if rank is None else {"rank": rank}
    unit = Unit(pid=100 + index, devices=(0,), ops=1, time_ns=1, part="")
    return Outcome(index, f"r{index}.json", OK, units=(unit,), meta=meta)


def test_ranks_the_caller_knows_replace_what_the_reports_say():
    outcomes = [outcome(0, None), outcome(1, 5)]
    ranks, rule = assign_ranks(outcomes, {0: 0, 1: 2})
    assert [(r.rank, r.index, r.source) for r in ranks] == [(0, 0, DECLARED), (2, 1, DECLARED)]
    assert "nsysmap run" in rule
    ranks, rule = assign_ranks(outcomes)
    assert [r.source for r in ranks] == [FILE_ORDER, FILE_ORDER]


# ------------------------------------------------------------ which rank assembles


def test_one_rank_claims_the_assembly_and_the_others_wait_for_it(tmp_path: Path):
    assert rank_mode._claim(tmp_path, "j")
    assert not rank_mode._claim(tmp_path, "j")
    with rank_mode._holding(tmp_path, "j"):
        assert (tmp_path / ".assemble-j").exists()
    assert (tmp_path / ".assembled-j").exists() and not (tmp_path / ".assemble-j").exists()
    assert not rank_mode._claim(tmp_path, "j")  # assembled already
    started = time.monotonic()
    rank_mode._wait_done(tmp_path, "j", stop=lambda: False)
    assert time.monotonic() - started < 1


def test_waiting_for_an_assembler_that_is_gone_ends(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(rank_mode, "STALE_S", 0.2)
    assert rank_mode._claim(tmp_path, "j")
    started = time.monotonic()
    rank_mode._wait_done(tmp_path, "j", stop=lambda: False)  # nobody touches the claim
    assert 0.2 <= time.monotonic() - started < 5
    rank_mode._wait_done(tmp_path, "k", stop=lambda: False)  # never claimed: returns


@pytest.mark.parametrize("status", [0, 1])
def test_a_rank_that_left_the_assembly_to_another_says_where_the_outputs_are(status, tmp_path):
    mine = state(1, status, 1.0, exit_status=status)
    result = rank_mode.RankResult(who(1), Path("train.py"), tmp_path, mine)
    assert result.done_line().startswith(f"nsysmap: rank 1 of 2 {mine.how()}; captured into")
    failure = result.failure()
    assert (failure is None) == (status == 0)
    if failure is not None:
        assert str(failure).startswith("rank 1 of 2: train.py exited with status 1")


# ------------------------------------------------------------ a job with nothing captured


def test_a_job_where_no_rank_captured_anything_names_the_first_failure(tmp_path: Path):
    capture = tmp_path / "out" / contract.CAPTURE_DIR
    write_record(capture, 0, 1, 5.0)
    write_record(capture, 1, 137, 2.0)
    launch = contract.rank_dir(capture, 0) / contract.LAUNCH_RECORD
    launch.write_text(json.dumps({"exit_status": 1, "exception": "RuntimeError: peer gone"}))
    plan = JobPlan(
        RunRequest(Path("train.py")), tmp_path / "out", 2, "torchrun", "torch", "test", job="job1"
    )
    with pytest.raises(ScriptFailed) as failed:
        assemble(plan)
    assert failed.value.status == 137
    assert str(failed.value).startswith(
        "rank 1 of 2 exited with status 137; rank 0 failed after it (status 1); nothing was "
        "captured (rank 0 captured nothing: exited with status 1 (RuntimeError: peer gone)"
    )
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["exit_status"] == 137 and run["failed_ranks"] == [0, 1]
    assert run["not_captured"]["1"] == "rank 1 captured nothing: exited with status 137"


def test_a_job_where_every_rank_succeeded_without_a_capture_is_profiler_failed(tmp_path: Path):
    capture = tmp_path / "out" / contract.CAPTURE_DIR
    for rank in (0, 1):
        write_record(capture, rank, 0, 1.0)
    plan = JobPlan(RunRequest(Path("train.py")), tmp_path / "out", 2, "torchrun", "torch", "t")
    with pytest.raises(ProfilerFailed, match=r"no rank of train\.py captured anything"):
        assemble(plan)


def test_a_capture_that_could_not_be_attributed_is_exit_9(tmp_path: Path):
    states = tuple(state(r, 0, 1.0, exit_status=0) for r in (0, 1))
    outcomes = (
        Outcome(0, "rank0/trace.json", OK),
        Outcome(1, "rank1/trace.json", FAILED, error="not a trace", exit_code=4),
    )
    ranks = pl.DataFrame({"rank": [0]})
    many = ManyResult(tmp_path, outcomes, {"ranks": ranks}, {"tables": {}}, "")
    plan = JobPlan(RunRequest(Path("train.py")), tmp_path, 2, "torchrun", "torch", "t")
    failure = JobResult(plan, states, many, ()).failure()
    assert isinstance(failure, SomeProfilesFailed) and failure.exit_code == 9
    assert str(failure).startswith(
        "1 of 2 captures could not be attributed (rank1/trace.json: not a trace)"
    )
    assert JobResult(plan, states, replace(many, outcomes=outcomes[:1]), ()).failure() is None


# ------------------------------------------------------------ answers that name rank and step


def test_the_cross_rank_answers_name_their_steps():
    steps = pl.DataFrame({"rank": [0, 0, 1, 1, 0], "step": [1, 2, 1, 2, None]})
    assert steps_said(steps) == "steps 1-2 and the time outside steps"
    assert steps_said(steps.drop_nulls()) == "steps 1-2"
    assert steps_said(pl.DataFrame({"rank": [0], "step": [3]})) == "step 3"
    assert steps_said(pl.DataFrame({"rank": [0, 0, 0], "step": [1, 3, 5]})) == "steps 1, 3, 5"
    assert steps_said(None) == "the profile"


def test_the_straggler_line_names_the_step_that_cost_most_and_the_job_line_the_failure():
    stragglers = pl.DataFrame(
        {
            "step": [1, 2, None],
            "ranks": [2, 2, 2],
            "slowest_rank": [1, 1, 0],
            "fastest_rank": [0, 0, 1],
            "straggler_cost_ns": [1_000_000, 5_000_000, 0],
        }
    )
    options = {"first_failure": "rank 1 of 2 was killed by SIGKILL (status 137)"}
    found = Findings({"options": options}, pl.DataFrame(), stragglers, pl.DataFrame(), None, None)
    found = replace(found, steps="steps 1-2 and the time outside steps")
    line = straggler_line(found)
    assert line is not None and line.startswith(
        "Straggler cost: 6.000 ms over 3 step(s) (steps 1-2 and the time outside steps)"
    )
    assert line.endswith("the most in step 2, 5.000 ms (rank 1 slowest, rank 0 fastest).")
    assert job_line(found) == "The job failed: rank 1 of 2 was killed by SIGKILL (status 137)."
    assert job_line(replace(found, manifest={"options": {}})) is None
