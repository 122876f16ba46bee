"""One rank of a distributed job: run its training process, record how it ended, wait for the rest.

    python -m instrument.rank_guard --capture DIR [--job KEY] [--grace-s S] -- PROGRAM [ARGS...]

torchrun starts this once per rank for `nsysmap run --nproc-per-node N`, and
`nsysmap run` calls the same functions in each rank it runs as (`torchrun ...
nsysmap run SCRIPT`). The rank comes from torchrun's environment (RANK,
LOCAL_RANK, WORLD_SIZE). PROGRAM (the launcher, or nsys running it) is the
same command line on every rank: `%q{RANK}` in it is expanded by the launcher
and by nsys alike, so each rank captures into its own directory,
DIR/rank<RANK>/ (instrument/contract.py).

`supervise` runs PROGRAM in this process's group, so a signal torchrun sends
to the rank's group (SIGTERM when another rank failed, SIGINT on Ctrl-C)
reaches the training process itself, whose launcher saves what it captured;
this process only notes it and goes on waiting. Then it writes
DIR/rank<RANK>/rank.json (contract.RankRecord).

`wait_for_ranks` then waits until every rank of the job has written its
record, or, once one rank has failed, at most `grace_s` seconds more: in a
synchronous job the others stop soon after (gloo raises at once; NCCL may
hang until its own timeout). No rank leaves before then, so torchrun, which
stops every rank as soon as one exits with an error, does not kill ranks
that are still saving their captures.

Imports neither torch nor polars (tests/test_imports.py): a guard is a small
Python process per rank.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from instrument import contract

GRACE_S = 60.0  # how long the ranks wait for the others once one has failed
POLL_S = 0.25
LEAVE_AFTER_S = 1.0  # how much later than the rank that failed first the others leave
TORCHRUN = "torchrun"
# What tells one run of a torchrun job from another (and from a previous run in the same folder).
JOB_ENV = ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT")


@dataclass(frozen=True)
class RankIdentity:
    """Which rank of which job this process is."""

    rank: int
    world_size: int
    local_rank: int | None
    job: str


def _whole(value: str | None) -> int | None:
    return int(value) if value is not None and value.strip().isdigit() else None


def job_key(env: Mapping[str, str]) -> str:
    """A key the same on every rank of one torchrun job, and different for the next run."""
    said = "|".join(env.get(name, "") for name in (*JOB_ENV, "WORLD_SIZE"))
    return hashlib.sha1(said.encode()).hexdigest()[:12]


def rank_identity(env: Mapping[str, str], job: str | None = None) -> RankIdentity | None:
    """The rank torchrun's environment names (None: RANK or WORLD_SIZE unset or invalid)."""
    rank, world = _whole(env.get("RANK")), _whole(env.get("WORLD_SIZE"))
    if rank is None or world is None or rank >= world:
        return None
    return RankIdentity(rank, world, _whole(env.get("LOCAL_RANK")), job or job_key(env))


def fresh_rank_dir(capture: Path, rank: int) -> Path:
    """DIR/rank<RANK>/, emptied: it belongs to this rank, and nothing of a previous run may stay."""
    directory = contract.rank_dir(capture, rank)
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@contextmanager
def noted_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM only noted (in the list yielded) while inside; then as before."""
    seen: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, _frame: seen.append(signum))
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield seen
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def supervise(
    command: Sequence[str], capture: Path, who: RankIdentity, launched_by: str = TORCHRUN
) -> contract.RankRecord:
    """Run `command` (the rank's training process) to its end; write and return its RankRecord."""
    directory = fresh_rank_dir(capture, who.rank)
    started = time.time()
    pid, status = None, 127
    with noted_signals() as seen:
        try:
            proc = subprocess.Popen(list(command))  # this group: torchrun's signals reach it
        except OSError as exc:
            print(f"instrument.rank_guard: cannot start {command[0]}: {exc}", file=sys.stderr)
        else:
            pid, status = proc.pid, proc.wait()
    record = contract.RankRecord(
        rank=who.rank,
        world_size=who.world_size,
        local_rank=who.local_rank,
        job=who.job,
        launched_by=launched_by,
        host=socket.gethostname(),
        pid=pid,
        exit_status=rank_status(contract.read_launch_record(directory), status),
        signal=signal_name(status),
        interrupted=bool(seen),
        started_at=started,
        ended_at=time.time(),
        peak_rss_bytes=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
    )
    contract.write_rank_record(directory, record)
    return record


def signal_name(status: int | None) -> str | None:
    """The name of the signal that ended a process (status -9: `SIGKILL`), else None."""
    if status is None or status >= 0:
        return None
    try:
        return signal.Signals(-status).name
    except ValueError:
        return f"signal {-status}"


def rank_status(launch: Mapping[str, Any], status: int) -> int:
    """The script's exit status: the launcher's record, else the process's (128 + N: signal N)."""
    said = launch.get("exit_status")
    if isinstance(said, int) and not isinstance(said, bool):
        return said
    return 128 - status if status < 0 else status


def job_records(
    capture: Path, world_size: int, job: str | None, ranks: Sequence[int] | None = None
) -> dict[int, dict[str, Any]]:
    """Rank -> its rank.json, for the ranks that wrote one in job `job` (None: any job)."""
    found = {}
    for rank in range(world_size) if ranks is None else ranks:
        record = contract.read_rank_record(contract.rank_dir(capture, rank))
        if record and (job is None or record.get("job") == job):
            found[rank] = record
    return found


def wait_for_ranks(
    capture: Path,
    who: RankIdentity,
    grace_s: float = GRACE_S,
    stop: Callable[[], bool] = lambda: False,
) -> dict[int, dict[str, Any]]:
    """The job's rank records once every rank wrote one, or `grace_s` after a rank failed
    (or when `stop()` says so): rank -> record."""
    deadline = None
    while True:
        records = job_records(capture, who.world_size, who.job)
        if len(records) == who.world_size or stop():
            return records
        if deadline is None and any(r.get("exit_status") for r in records.values()):
            deadline = time.monotonic() + grace_s
        if deadline is not None and time.monotonic() >= deadline:
            return records
        time.sleep(POLL_S)


def failed_first(records: Mapping[int, Mapping[str, Any]]) -> int | None:
    """The rank that failed first among `records` (by the time it ended), if one failed."""
    failed = [
        (float(r.get("ended_at") or 0.0), rank)
        for rank, r in records.items()
        if r.get("exit_status")
    ]
    return min(failed)[1] if failed else None


def leave_in_order(records: Mapping[int, Mapping[str, Any]], who: RankIdentity) -> None:
    """Let the rank that failed first leave first: torchrun names the first rank it sees
    exit with an error as the job's root cause."""
    first = failed_first(records)
    if first is not None and first != who.rank:
        time.sleep(LEAVE_AFTER_S)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m instrument.rank_guard", description=__doc__)
    parser.add_argument("--capture", required=True, type=Path, help="the job's capture directory")
    parser.add_argument("--job", help="the job's key (default: from torchrun's environment)")
    parser.add_argument("--grace-s", type=float, default=GRACE_S, metavar="S")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point: supervise PROGRAM as this rank, wait for the job's other ranks."""
    args = sys.argv[1:] if argv is None else argv
    split = args.index("--") if "--" in args else len(args)
    opts, command = _parser().parse_args(args[:split]), args[split + 1 :]
    who = rank_identity(os.environ, opts.job)
    if not command or who is None:
        print(
            "instrument.rank_guard: needs PROGRAM after --, and RANK < WORLD_SIZE set (torchrun)",
            file=sys.stderr,
        )
        return 2
    record = supervise(command, opts.capture, who)
    with noted_signals() as seen:
        records = wait_for_ranks(opts.capture, who, opts.grace_s, stop=lambda: bool(seen))
        leave_in_order(records, who)
    return record.exit_status if 0 <= record.exit_status <= 255 else 1


if __name__ == "__main__":
    sys.exit(main())
