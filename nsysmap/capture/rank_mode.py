"""`torchrun ... nsysmap run SCRIPT`: one rank of the job, and the one that assembles it.

Each rank's nsysmap runs the launcher (under nsys, per rank) into
OUT/capture/rank<RANK>/ and waits for it as the rank guard does
(instrument/rank_guard.py: rank.json, then every rank's record, or a grace
period once one failed). Then one rank assembles the job:

    claim     OUT/capture/.assemble-<job>, created exclusively: the first rank
              to get there (the others find it taken); touched every few
              seconds while it works, so the others can tell it is alive
    assemble  nsysmap.capture.job_assemble: every rank's capture on Dask
    done      OUT/capture/.assembled-<job>; the claim is removed

The other ranks wait for `done` before they leave: torchrun stops every rank
as soon as one exits with an error, and would stop the one assembling. A
rank gives up waiting when the claim has not been touched for STALE_S (its
holder is gone). Every rank exits with its own script's status, as it
would without nsysmap; the assembling rank also reports the job's.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from instrument import contract
from instrument.contract import RANK_DIR_TEMPLATE, REPORT_BASE
from instrument.rank_guard import (
    RankIdentity,
    leave_in_order,
    noted_signals,
    supervise,
    wait_for_ranks,
)
from nsysmap.capture import profile_script
from nsysmap.capture.job_assemble import JobPlan, JobResult, assemble
from nsysmap.capture.profile_script import (
    BACKEND_NAMES,
    Notify,
    RunRequest,
    choose_backend,
    default_out_dir,
    launcher_command,
)
from nsysmap.capture.rank_states import RankState
from nsysmap.core.errors import ScriptFailed
from nsysmap.output.placement import check_output_dir
from nsysmap.read.nsys import nsys_tool

FORM = "torchrun"
HEARTBEAT_S = 2.0
STALE_S = 60.0  # a claim untouched this long: its rank is gone


@dataclass(frozen=True)
class RankResult:
    """A rank that captured its part and left the job's outputs to another rank."""

    who: RankIdentity
    script: Path
    out_dir: Path
    state: RankState
    summary_text: str = ""
    warnings: tuple[str, ...] = ()

    def done_line(self) -> str:
        capture = contract.rank_dir(self.out_dir / contract.CAPTURE_DIR, self.who.rank)
        return (
            f"nsysmap: rank {self.who.rank} of {self.who.world_size} {self.state.how()}; "
            f"captured into {capture}; the job's outputs are in {self.out_dir}/"
        )

    def failure(self) -> ScriptFailed | None:
        if not self.state.failed:
            return None
        message = (
            f"rank {self.who.rank} of {self.who.world_size}: {self.script.name} "
            f"{self.state.how()}; the job's outputs are in {self.out_dir}/"
        )
        return ScriptFailed(message, status=self.state.status or 1)


def run_rank(request: RunRequest, who: RankIdentity, notify: Notify) -> RankResult | JobResult:
    """This rank under nsysmap: capture, wait for the others, assemble if first to claim."""
    script = profile_script._existing(request.script)
    backend, reason, nsys = choose_backend(request.backend)
    out_dir = check_output_dir(request.out_dir or default_out_dir(script))
    capture = out_dir / contract.CAPTURE_DIR
    command = rank_command(request, backend, capture, nsys)
    if who.rank == 0:
        notify(
            f"nsysmap: profiling {script.name} on {who.world_size} ranks (torchrun) with "
            f"{BACKEND_NAMES[backend]} ({reason})"
        )
    supervise(command, capture, who)
    with noted_signals() as seen:
        records = wait_for_ranks(capture, who, stop=lambda: bool(seen))
        mine = RankState(
            who.rank,
            contract.read_rank_record(contract.rank_dir(capture, who.rank)),
            contract.read_launch_record(contract.rank_dir(capture, who.rank)),
        )
        if not _claim(capture, who.job):
            _wait_done(capture, who.job, stop=lambda: bool(seen))
            leave_in_order(records, who)
            return RankResult(who, script, out_dir, mine)
        plan = JobPlan(
            request, out_dir, who.world_size, FORM, backend, reason, nsys, who.job,
            record={"command": command, "assembled_by": who.rank},
        )  # fmt: skip
        with _holding(capture, who.job):
            result = assemble(plan)
        leave_in_order(records, who)
    return _as_rank(result, mine)


def rank_command(request: RunRequest, backend: str, capture: Path, nsys: Path | None) -> list[str]:
    """What every rank runs, the same command line on each: the launcher (under its own
    nsys, given `nsys`), capturing into capture/rank<RANK>/."""
    program = launcher_command(request, backend, capture / RANK_DIR_TEMPLATE)
    if nsys is None:
        return program
    return nsys_tool.profile_command(nsys, capture / RANK_DIR_TEMPLATE / REPORT_BASE, program)


def _as_rank(result: JobResult, mine: RankState) -> JobResult:
    """The job's result as this rank reports it: its own status; the job's failure a warning."""
    failure = result.failure()
    if failure is None or mine.failed:
        return replace(result, own=mine)
    return replace(result, own=mine, warnings=(*result.warnings, f"the job failed: {failure}"))


def _claim_file(capture: Path, job: str) -> Path:
    return capture / f".assemble-{job}"


def _done_file(capture: Path, job: str) -> Path:
    return capture / f".assembled-{job}"


def _claim(capture: Path, job: str) -> bool:
    """Take the job's assembly (True), unless another rank has (False)."""
    if _done_file(capture, job).exists():
        return False
    try:
        os.close(os.open(_claim_file(capture, job), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


@contextmanager
def _holding(capture: Path, job: str) -> Iterator[None]:
    """While inside: the claim touched every HEARTBEAT_S; after: the job marked done."""
    claim, stop = _claim_file(capture, job), threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            claim.touch()

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        _done_file(capture, job).touch()
        claim.unlink(missing_ok=True)


def _wait_done(capture: Path, job: str, stop: Callable[[], bool]) -> None:
    """Until the job is assembled, its assembler is gone, or `stop()`."""
    claim, done = _claim_file(capture, job), _done_file(capture, job)
    while not done.exists() and not stop():
        try:
            if time.time() - claim.stat().st_mtime > STALE_S:
                return
        except FileNotFoundError:
            if not done.exists():
                return
        time.sleep(0.25)
