"""How each rank of a distributed job ended, read from its capture directory.

Each rank's directory holds two records (instrument/contract.py): launch.json,
written by the rank's own launcher (the script's status, exception, steps),
and rank.json, written by the process that waited for it (its status as a
process, the signal that ended it, its peak memory). A rank killed outright
leaves no launch.json; one whose waiting process was killed too leaves
neither. `first_failure` names the rank that failed first (by the time it
ended): in a synchronous job, the others usually fail because it did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from instrument import contract
from instrument.rank_guard import job_records


@dataclass(frozen=True)
class RankState:
    """One rank: its two records ({} when missing) and the capture found for it."""

    rank: int
    record: dict[str, Any]  # rank.json
    launch: dict[str, Any]  # launch.json

    @property
    def status(self) -> int | None:
        """The script's exit status (None: nothing says how the rank ended)."""
        for said in (self.launch.get("exit_status"), self.record.get("exit_status")):
            if isinstance(said, int) and not isinstance(said, bool):
                return said
        return None

    @property
    def failed(self) -> bool:
        return self.status != 0 or bool(self.launch.get("interrupted"))

    @property
    def profiled(self) -> tuple[int, int] | None:
        steps = self.launch.get("profiled_steps")
        if isinstance(steps, list) and len(steps) == 2 and all(type(s) is int for s in steps):
            return steps[0], steps[1]
        return None

    def how(self) -> str:
        """How the rank ended, as a clause: "was killed by SIGKILL (status 137)"."""
        status, signal = self.status, self.record.get("signal")
        if status is None:
            return "left no record of how it ended (its processes were killed?)"
        if signal and not self.launch:
            return f"was killed by {signal} (status {status})"
        if self.launch.get("interrupted"):
            return f"was interrupted (status {status})"
        exception = str(self.launch.get("exception") or "")
        said = f" ({exception})" if exception and not exception.startswith("SystemExit") else ""
        return f"exited with status {status}{said}" if status else "succeeded"

    def entry(self, capture: Path | None) -> dict[str, Any]:
        """The rank's entry in the job's run.json."""
        steps = self.launch.get("steps_seen")
        return {
            "rank": self.rank,
            "status": self.status,
            "how": self.how(),
            "signal": self.record.get("signal"),
            "exception": self.launch.get("exception"),
            "steps_seen": steps,
            "profiled_steps": self.launch.get("profiled_steps"),
            "capture": None if capture is None else str(capture),
            "host": self.record.get("host"),
            "pid": self.record.get("pid"),
            "wall_s": self.launch.get("wall_s"),
            "peak_rss_bytes": self.record.get("peak_rss_bytes")
            or self.launch.get("peak_rss_bytes"),
            "notes": self.launch.get("notes") or [],
        }


def rank_states(capture: Path, ranks: Sequence[int], job: str | None) -> list[RankState]:
    """Every rank in `ranks`, with what its directory says (rank.json of job `job` only)."""
    records = job_records(capture, max(ranks, default=-1) + 1, job, ranks)
    return [
        RankState(r, records.get(r, {}), contract.read_launch_record(contract.rank_dir(capture, r)))
        for r in ranks
    ]


def first_failure(states: Sequence[RankState]) -> RankState | None:
    """The rank that failed first: the earliest to end among those that failed (a rank
    without a record comes after every rank that has one)."""
    failed = [s for s in states if s.failed]
    if not failed:
        return None
    return min(failed, key=lambda s: (_ended(s), s.rank))


def _ended(state: RankState) -> float:
    ended = state.record.get("ended_at")
    return float(ended) if isinstance(ended, (int, float)) else float("inf")


def ranks_text(ranks: Sequence[int]) -> str:
    """Ranks as words: `rank 2`, `ranks 0, 1 and 3`."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    listed = [str(r) for r in ranks]
    return f"ranks {', '.join(listed[:-1])} and {listed[-1]}"


def failure_line(states: Sequence[RankState], world_size: int) -> str | None:
    """Which rank failed first and with what, then the others that failed (None when every
    rank succeeded): `rank 1 of 3 was killed by SIGKILL (status 137); ranks 0 and 2 failed
    after it (status 1)`."""
    first = first_failure(states)
    if first is None:
        return None
    if first.launch.get("interrupted"):  # Ctrl-C reaches every rank: one line for them all
        stopped = [s for s in states if s.launch.get("interrupted")]
        were = "was" if len(stopped) == 1 else "were"
        line = f"{ranks_text([s.rank for s in stopped])} of {world_size} {were} interrupted"
        line += f" (status {', '.join(sorted({str(s.status) for s in stopped}))})"
    else:
        stopped = [first]
        line = f"rank {first.rank} of {world_size} {first.how()}"
    after = [s for s in states if s.failed and s not in stopped]
    if after:
        codes = sorted({str(s.status) for s in after if s.status is not None})
        said = f" (status {', '.join(codes)})" if codes else ""
        line += f"; {ranks_text([s.rank for s in after])} failed after it{said}"
    return line


def window_doubt(states: Sequence[RankState]) -> str | None:
    """A line when the ranks' profiling windows did not start at the same step, or, where
    every rank succeeded, did not end at the same step (None: they are aligned)."""
    windows = {s.rank: s.profiled for s in states if s.profiled is not None}
    starts = {w[0] for w in windows.values()}
    ends = {w[1] for w in windows.values()}
    if len(starts) < 2 and (len(ends) < 2 or any(s.failed for s in states)):
        return None
    shown = "; ".join(f"rank {r}: steps {w[0]}-{w[1]}" for r, w in sorted(windows.items())[:4])
    return f"the ranks profiled different steps ({shown})"
