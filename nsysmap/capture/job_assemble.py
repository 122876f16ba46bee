"""A distributed job's outputs from its ranks' captures, through the many-reports path on Dask.

    OUT/capture/rank<R>/          each rank's capture: launch.json, rank.json, and
                                  trace.json (torch) or report.nsys-rep (nsys, one per rank)
    OUT/capture/report.nsys-rep   or one nsys report for the whole job
      -> nsys export (each report)
      -> nsysmap.many.run_many: one Dask task per capture, the ranks numbered as
         they ran (RANK), OUT/ops/rank=R/, the summaries with a rank column,
         ranks, rank_steps, stragglers, rank_module*, rank_comm, manifest.json
      -> OUT/run.json: how the job was started, how each rank ended, which failed first

The ranks whose captures exist are attributed even when others crashed or
were killed; `JobResult.failure()` then names the rank that failed first and
exits with its status. `nsysmap run` reaches this in three ways
(docs/run.md, Distributed training): `--nproc-per-node` (after torchrun
ends), under torchrun (the rank that assembles), and for a script that
spawned its ranks with torch.multiprocessing.spawn.
"""

from __future__ import annotations

import json
import resource
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from instrument import contract
from instrument.contract import REPORT_BASE, TRACE
from nsysmap._version import __version__
from nsysmap.capture.profile_script import BACKEND_NAMES, RUN_RECORD, RunRequest
from nsysmap.capture.rank_states import (
    RankState,
    failure_line,
    first_failure,
    rank_states,
    ranks_text,
    window_doubt,
)
from nsysmap.core.errors import NsysmapError, ProfilerFailed, ScriptFailed, SomeProfilesFailed
from nsysmap.read.nsys import nsys_tool

if TYPE_CHECKING:
    from nsysmap.many import ManyResult


@dataclass(frozen=True)
class JobPlan:
    """A distributed run to assemble: its ranks, where they captured, how they were started."""

    request: RunRequest
    out_dir: Path
    world_size: int
    form: str  # how the ranks were started: FORMS
    backend: str
    backend_reason: str
    nsys: Path | None = None
    job: str | None = None  # the key of its rank records (None: the directory's, whatever)
    ranks: tuple[int, ...] | None = None  # None: 0 .. world_size - 1
    one_report: bool = False  # one nsys report for the whole job
    record: dict[str, Any] = field(default_factory=dict)  # more for run.json

    @property
    def capture(self) -> Path:
        return self.out_dir / contract.CAPTURE_DIR

    @property
    def expected(self) -> tuple[int, ...]:
        return self.ranks if self.ranks is not None else tuple(range(self.world_size))


@dataclass(frozen=True)
class JobResult:
    """An assembled job: how each rank ended, and what was attributed."""

    plan: JobPlan
    states: tuple[RankState, ...]
    many: ManyResult
    warnings: tuple[str, ...]
    own: RankState | None = None  # the rank reporting it (torchrun ... nsysmap run), if one

    @property
    def summary_text(self) -> str:
        return self.many.summary_text

    @property
    def attributed(self) -> list[int]:
        return sorted(int(r) for r in self.many.tables["ranks"]["rank"].to_list())

    def done_line(self) -> str:
        plan = self.plan
        tables = len(self.many.manifest["tables"]) - 1
        return (
            f"Profiled {plan.world_size} ranks with {BACKEND_NAMES[plan.backend]} "
            f"({plan.backend_reason}); wrote the ops dataset, {tables} tables, manifest.json "
            f"and run.json to {plan.out_dir}"
        )

    def failure(self) -> NsysmapError | None:
        """The error naming the rank that failed first, with its status (with `own`, this
        rank's status, and only when this rank failed); when every rank succeeded but a
        capture could not be attributed, exit 9; None: all went well."""
        line = failure_line(self.states, self.plan.world_size)
        first = first_failure(self.states)
        if line is None or first is None:
            return self._not_attributed()
        where = f"outputs for {ranks_text(self.attributed)} are in {self.plan.out_dir}/"
        if self.own is not None:
            if not self.own.failed:
                return None
            first = self.own
        return ScriptFailed(f"{line}; {where}", status=first.status or 1)

    def _not_attributed(self) -> NsysmapError | None:
        failed = self.many.failed
        if not failed:
            return None
        names = ", ".join(f"{o.path}: {o.error}" for o in failed[:2])
        return SomeProfilesFailed(
            f"{len(failed)} of {len(self.many.outcomes)} captures could not be attributed "
            f"({names}); the others were written to {self.plan.out_dir}/"
        )


def assemble(plan: JobPlan) -> JobResult:
    """Attribute every rank's capture together and write the job's outputs and run.json."""
    from nsysmap.many import ClusterOptions, run_many

    started = time.monotonic()
    states = rank_states(plan.capture, plan.expected, plan.job)
    found, missing = captures(plan, states)
    record = job_record(plan, states, found, missing)
    try:
        if not found:
            raise nothing_captured(plan, states, missing)
        paths = list(found.values())
        many = run_many(
            paths,
            plan.out_dir,
            where=ClusterOptions(scheduler=plan.request.scheduler),
            options=_options(plan, record),
            rules=plan.request.rules,
            known_ranks=None if plan.one_report else list(found),
        )
    finally:
        record["assembly_s"] = round(time.monotonic() - started, 3)
        record["assembly_peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
        path = plan.out_dir / RUN_RECORD
        path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    warnings = [w for w in (window_doubt(states), *missing.values()) if w]
    return JobResult(plan, tuple(states), many, tuple(warnings))


def captures(plan: JobPlan, states: list[RankState]) -> tuple[dict[int, Path], dict[int, str]]:
    """Rank -> the file to attribute (exported from nsys first), and rank -> why there is none.

    With one nsys report for the job, the job's report is the one capture (key -1)."""
    if plan.backend == "torch":
        found, missing = {}, {}
        for state in states:
            named = state.launch.get("trace")
            trace = contract.rank_dir(plan.capture, state.rank) / (
                named if isinstance(named, str) and named else TRACE
            )
            if trace.is_file():
                found[state.rank] = trace
            else:
                missing[state.rank] = f"rank {state.rank} captured nothing: {_why(state)}"
        return found, missing
    if plan.one_report:
        return _exported({-1: plan.capture / REPORT_BASE})
    return _exported(
        {s.rank: contract.rank_dir(plan.capture, s.rank) / REPORT_BASE for s in states}
    )


def _why(state: RankState) -> str:
    """Why a rank left no capture: how it failed, else its launcher's first note."""
    notes = state.launch.get("notes") or []
    if state.failed or not notes:
        return state.how()
    return str(notes[0])


def _exported(bases: dict[int, Path]) -> tuple[dict[int, Path], dict[int, str]]:
    """Each nsys report exported to SQLite beside it, several at once."""

    def export(base: Path) -> Path | str:
        report = nsys_tool.report_file(base)
        if report is None:
            return f"nsys wrote no report at {base}.nsys-rep"
        try:
            return nsys_tool.export_sqlite(report, base.with_name(f"{base.name}.sqlite"))
        except NsysmapError as exc:
            return str(exc)

    with ThreadPoolExecutor(max(1, min(4, len(bases)))) as pool:
        done = dict(zip(bases, pool.map(export, bases.values()), strict=True))
    found = {rank: out for rank, out in done.items() if isinstance(out, Path)}
    missing = {rank: _rank_said(rank, out) for rank, out in done.items() if isinstance(out, str)}
    return found, missing


def _rank_said(rank: int, why: str) -> str:
    return why if rank < 0 else f"rank {rank} captured nothing: {why}"


def nothing_captured(
    plan: JobPlan, states: list[RankState], missing: dict[int, str]
) -> NsysmapError:
    """No rank left a capture: the first failure's status when a rank failed, else exit 7."""
    line = failure_line(states, plan.world_size)
    first = first_failure(states)
    why = "; ".join(list(missing.values())[:3]) or "no rank recorded anything"
    if line is not None and first is not None and first.status:
        return ScriptFailed(f"{line}; nothing was captured ({why})", status=first.status)
    return ProfilerFailed(f"no rank of {plan.request.script.name} captured anything: {why}")


def job_record(
    plan: JobPlan, states: list[RankState], found: dict[int, Path], missing: dict[int, str]
) -> dict[str, Any]:
    """run.json of a distributed run: how it started, how each rank ended."""
    first = first_failure(states)
    return {
        "nsysmap_version": __version__,
        "distributed": plan.form,
        "backend": plan.backend,
        "backend_reason": plan.backend_reason,
        "script": str(plan.request.script),
        "script_args": list(plan.request.script_args),
        "world_size": plan.world_size,
        **plan.record,
        "exit_status": 0 if first is None else first.status,
        "first_failure": failure_line(states, plan.world_size),
        "failed_ranks": [s.rank for s in states if s.failed],
        "one_nsys_report": plan.one_report,
        "captures": {str(rank): str(path) for rank, path in found.items()},
        "not_captured": {str(rank): why for rank, why in missing.items()},
        "window": window_doubt(states),
        "ranks": [s.entry(found.get(s.rank)) for s in states],
    }


def _options(plan: JobPlan, record: dict[str, Any]) -> dict[str, Any]:
    """The run's settings and outcome, as the job's manifest.json records them."""
    request = plan.request
    own = ("distributed", "backend", "script", "script_args", "world_size", "exit_status")
    return {
        "command": "run",
        **{key: record[key] for key in own},
        "failed_ranks": record["failed_ranks"],
        "first_failure": record["first_failure"],
        "warmup_steps": request.warmup_steps,
        "steps": request.steps,
        "record_shapes": request.record_shapes,
        **request.rules.options(),
    }
