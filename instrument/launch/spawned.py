"""Ranks a script starts itself: torch.multiprocessing.spawn instrumented, other processes counted.

While the script runs, `torch.multiprocessing.spawn` and `start_processes`
(start method spawn or forkserver) start each process as `SpawnedRank(fn)`:
in the child, `fn(i, *args)` runs under the same instrumentation and
profiling window as a script would (instrument.launch._run), capturing into
DIR/rank<i>/ with its own launch.json. The launcher waits for them as
torch would (a failure stops the others, after a grace period to save their
captures) and writes each one's rank.json once it has ended: status, and the
signal that ended it.

Processes started otherwise through multiprocessing (a script's own
`Process(target=...)`, DataLoader workers) are not instrumented, only
counted: when no step ran in the script's own process, a note says that the
work ran in child processes and how to start the ranks instead.
"""

from __future__ import annotations

import argparse
import copy
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from instrument import contract
from instrument.launch._root_call import NO_CALL
from instrument.launch._run import Terminated, instrumented, launch_record, outcome, sigterm_raises
from instrument.launch._window import ProfileWindow
from instrument.ranges._patch import Patches
from instrument.rank_guard import rank_status, signal_name

LAUNCHED_BY = "torch.multiprocessing.spawn"
INSTRUMENTED_METHODS = ("spawn", "forkserver")
GRACE_S = 30.0  # after a rank fails, how long the others have to end on their own


class SpawnedRank:
    """The function a spawned rank runs: the script's `fn(i, *args)`, instrumented (picklable)."""

    def __init__(self, fn: Callable[..., object], opts: argparse.Namespace, argv: list[str]):
        self.fn, self.opts, self.argv = fn, opts, argv

    def __call__(self, index: int, *args: Any) -> None:
        opts = copy.copy(self.opts)
        opts.out = contract.rank_dir(self.opts.out, index)

        def body() -> None:
            with sigterm_raises():
                self.fn(index, *args)

        ended = instrumented(opts, body)
        ending = outcome(ended.error, self.argv[0], show=False)  # the parent shows the error
        record = launch_record(opts, self.argv, ended, ending, rank=index)
        contract.write_launch_record(opts.out, record)
        for note in ended.window.notes:
            print(f"instrument.launch: rank {index}: {note}", file=sys.stderr)
        if isinstance(ended.error, Terminated):
            raise SystemExit(ending[0])
        if ended.error is not None:
            raise ended.error


class ChildWatch:
    """Inside, while the script runs: spawned ranks instrumented, other processes counted."""

    def __init__(self, opts: argparse.Namespace, script: str, argv: list[str] | None = None):
        self.opts, self.argv = opts, argv or [script]
        self.spawned: list[int] = []
        self.others = 0  # processes started through multiprocessing, not instrumented
        self._contexts: list[Any] = []
        self._recorded: set[int] = set()
        self._ended: dict[int, float] = {}  # rank -> when its end was seen
        self._patches = Patches()
        self._starting = False
        self._job = uuid.uuid4().hex[:12]
        self._started_at = 0.0

    def __enter__(self) -> ChildWatch:
        import importlib
        import multiprocessing.process

        import torch.multiprocessing

        # The module, not the function `torch.multiprocessing.spawn` that shadows its name.
        spawn_module = importlib.import_module("torch.multiprocessing.spawn")
        self._patches.replace(spawn_module, "start_processes", self._start)
        self._patches.replace(torch.multiprocessing, "start_processes", self._start)
        self._patches.replace(multiprocessing.process.BaseProcess, "start", self._count)
        return self

    def __exit__(self, *exc: object) -> None:
        self._patches.undo()
        self._record_ended()

    def _count(self, start: Callable[[Any], None]) -> Callable[[Any], None]:
        def counted(process: Any) -> None:
            if not self._starting:
                self.others += 1
            start(process)

        return counted

    def _start(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def start_processes(
            fn: Callable[..., object],
            args: tuple[Any, ...] = (),
            nprocs: int = 1,
            join: bool = True,
            daemon: bool = False,
            start_method: str = "spawn",
        ) -> Any:
            if start_method not in INSTRUMENTED_METHODS or self.spawned:
                return original(fn, args, nprocs, join, daemon, start_method)
            for rank in range(nprocs):  # nothing of a previous run may be read as this one's
                shutil.rmtree(contract.rank_dir(self.opts.out, rank), ignore_errors=True)
            self.spawned, self._started_at = list(range(nprocs)), time.time()
            self._starting = True
            try:
                wrapped = SpawnedRank(fn, self.opts, self.argv)
                context = original(wrapped, args, nprocs, False, daemon, start_method)
            finally:
                self._starting = False
            self._contexts.append(context)
            if not join:
                return context
            try:
                self._until_one_fails(context)
                while not context.join(grace_period=GRACE_S):
                    pass
            finally:
                self._record_ended()
            return None

        return start_processes

    def _until_one_fails(self, context: Any) -> None:
        """Wait until every process has ended or one has failed, noting when each ended (so
        that the one that failed first is known); torch's own join does the rest."""
        import multiprocessing.connection

        waiting = {process.sentinel: rank for rank, process in enumerate(context.processes)}
        while waiting:
            ready = multiprocessing.connection.wait(list(waiting), timeout=1.0)
            now = time.time()
            for sentinel in ready:
                self._ended.setdefault(waiting.pop(sentinel), now)
            if any(context.processes[rank].exitcode for rank in self._ended):
                return

    def _record_ended(self) -> None:
        """rank.json for each spawned process that has ended and has none yet."""
        for context in self._contexts:
            world = len(context.processes)
            for rank, process in enumerate(context.processes):
                status = process.exitcode
                if rank in self._recorded or status is None:
                    continue
                directory = contract.rank_dir(self.opts.out, rank)
                directory.mkdir(parents=True, exist_ok=True)
                launch = contract.read_launch_record(directory)
                record = contract.RankRecord(
                    rank=rank,
                    world_size=world,
                    local_rank=rank,
                    job=self._job,
                    launched_by=LAUNCHED_BY,
                    host=socket.gethostname(),
                    pid=process.pid,
                    exit_status=rank_status(launch, status),
                    signal=signal_name(status),
                    interrupted=False,
                    started_at=self._started_at,
                    ended_at=self._ended.get(rank, time.time()),
                    peak_rss_bytes=launch.get("peak_rss_bytes"),
                )
                contract.write_rank_record(directory, record)
                self._recorded.add(rank)

    def finish(self, window: ProfileWindow, steps_seen: int) -> None:
        """The notes on where the steps ran, when not in the script's own process."""
        notes = window.notes
        if self.spawned:  # what the script's own process did not do, the ranks did
            notes[:] = [n for n in notes if n not in (window.unprofiled, NO_CALL)]
            notes.append(
                f"no step ran in the script's own process: it spawned {len(self.spawned)} "
                f"rank(s) with {LAUNCHED_BY}, each profiled into its own directory "
                f"(rank0 .. rank{len(self.spawned) - 1})"
            )
        elif steps_seen == 0 and self.others:
            notes.append(
                f"no step ran in the script's own process; it started {self.others} other "
                "process(es) through multiprocessing, which are not instrumented. If they are "
                "the ranks of a distributed job, start them with `nsysmap run --nproc-per-node "
                "N SCRIPT`, with `torchrun ... nsysmap run SCRIPT`, or with "
                "torch.multiprocessing.spawn"
            )
