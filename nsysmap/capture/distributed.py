"""`nsysmap run` on distributed training: which launch form, and starting the ranks.

    nsysmap run --nproc-per-node N SCRIPT [-- ARGS]       run_job: nsysmap starts torchrun
        [nsys profile ... -o OUT/capture/report]           (--one-nsys-report: one for the job)
        python -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node=N
            -m instrument.rank_guard --capture OUT/capture --job KEY --
            [nsys profile ... -o OUT/capture/rank%q{RANK}/report]   (else one per rank)
            python -m instrument.launch --backend B --out OUT/capture/rank%q{RANK} ... SCRIPT ARGS
        then, once torchrun has ended, the job is assembled here (capture/job_assemble.py)
    torchrun ... nsysmap run SCRIPT [-- ARGS]             each rank under nsysmap: rank_mode.py
    nsysmap run SCRIPT (which calls mp.spawn)              spawned_job, once the launcher ended

The command of every rank is the same; `%q{RANK}` in it is expanded by the
launcher and by nsys alike, from the environment torchrun gives each rank.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from instrument.contract import REPORT_BASE
from instrument.rank_guard import rank_identity
from nsysmap.capture import profile_script
from nsysmap.capture.job_assemble import JobPlan, JobResult, assemble
from nsysmap.capture.profile_script import (
    BACKEND_NAMES,
    Notify,
    RunRequest,
    RunResult,
    choose_backend,
    default_out_dir,
    run_child,
)
from nsysmap.capture.rank_mode import RankResult, rank_command, run_rank
from nsysmap.core.errors import ExitCode, NsysmapError
from nsysmap.output.placement import check_output_dir
from nsysmap.read.nsys import nsys_tool

FORM_NPROC = "nsysmap run --nproc-per-node"
FORM_TORCHRUN = "torchrun"
FORM_SPAWN = "torch.multiprocessing.spawn"
TORCHRUN_MODULE = "torch.distributed.run"
GUARD_MODULE = "instrument.rank_guard"


def run_any(request: RunRequest, notify: Notify) -> RunResult | JobResult | RankResult:
    """`nsysmap run` in the form the request and the environment say."""
    who = rank_identity(os.environ)
    in_job = who is not None and who.world_size > 1
    if request.one_nsys_report and request.nproc_per_node is None:
        raise NsysmapError(
            "--one-nsys-report applies to --nproc-per-node", exit_code=ExitCode.USAGE
        )
    if request.nproc_per_node is not None:
        if in_job:
            raise NsysmapError(
                "--nproc-per-node starts the ranks itself; under torchrun, leave it out",
                exit_code=ExitCode.USAGE,
            )
        return run_job(request, notify)
    if who is not None and in_job:
        return run_rank(request, who, notify)
    return profile_script.run(
        request, notify=notify, spawned=lambda *done: spawned_job(request, *done)
    )


def torchrun_command(nproc: int, capture: Path, job: str, program: list[str]) -> list[str]:
    """torchrun (its module, with this Python) starting `program` under a rank guard, N times."""
    return [
        sys.executable,
        "-m",
        TORCHRUN_MODULE,
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={nproc}",
        "-m",
        GUARD_MODULE,
        "--capture",
        str(capture),
        "--job",
        job,
        "--",
        *program,
    ]


def run_job(request: RunRequest, notify: Notify) -> JobResult:
    """`nsysmap run --nproc-per-node N`: the ranks through torchrun, then the job assembled."""
    script = profile_script._existing(request.script)
    backend, reason, nsys = choose_backend(request.backend)
    out_dir = check_output_dir(request.out_dir or default_out_dir(script))
    capture = profile_script._fresh_capture_dir(out_dir)
    nproc, job = int(request.nproc_per_node or 1), uuid.uuid4().hex[:12]
    one = request.one_nsys_report and nsys is not None
    per_rank = None if one else nsys  # one nsys around torchrun, or one in every rank
    cmd = torchrun_command(nproc, capture, job, rank_command(request, backend, capture, per_rank))
    if one and nsys is not None:
        cmd = nsys_tool.profile_command(nsys, capture / REPORT_BASE, cmd)
    notify(
        f"nsysmap: profiling {script.name} on {nproc} ranks (torchrun) with "
        f"{BACKEND_NAMES[backend]} ({reason})"
    )
    started = time.monotonic()
    status, interrupted = run_child(cmd, notify)
    record = {
        "command": cmd,
        "nsys_version": None if nsys is None else nsys_tool.nsys_version(nsys),
        "launcher_status": status,
        "interrupted": interrupted,
        "wall_s": round(time.monotonic() - started, 3),
    }
    plan = JobPlan(
        request, out_dir, nproc, FORM_NPROC, backend, reason, nsys, job, None, one, record
    )
    return assemble(plan)


def spawned_job(
    request: RunRequest, record: dict[str, Any], out_dir: Path, nsys: Path | None
) -> JobResult:
    """A script that spawned its ranks (torch.multiprocessing.spawn): their captures, assembled.

    Under nsys, the one report holds every rank (nsys follows the children)."""
    ranks = tuple(int(r) for r in record["launch"]["spawned"])
    kept = ("command", "nsys_version", "child_status", "interrupted", "wall_s", "launch")
    plan = JobPlan(
        request,
        out_dir,
        len(ranks),
        FORM_SPAWN,
        record["backend"],
        record["backend_reason"],
        nsys,
        ranks=ranks,
        one_report=record["backend"] == "nsys",
        record={key: record.get(key) for key in kept},
    )
    return assemble(plan)
