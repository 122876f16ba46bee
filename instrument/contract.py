"""The capture directory and its launch record: what the launcher leaves for nsysmap.

`python -m instrument.launch --out DIR` (instrument/launch/) writes these
files inside the training process; `nsysmap run` (nsysmap/capture/profile_script.py),
nsysmap/flops/flops_document.py and nsysmap/read/torch/compiled_json.py read them after it. This
module is the one both sides import for the layout and the record, so it
imports neither torch nor polars; tests/test_contract_roundtrip.py writes
with the launcher's code and reads with nsysmap's.

    OUT/capture/                 CAPTURE_DIR: `nsysmap run --out OUT` passes it as DIR
        launch.json              LAUNCH_RECORD: a LaunchRecord, always written
        trace.json               TRACE: the torch.profiler chrome trace (backend torch)
        flops.json               FLOPS: the model's FLOP document (docs/flops.md)
        compiled.json            COMPILED: compiled-kernel provenance (instrument/compiled_doc.py)
        report.nsys-rep          REPORT_BASE + `.nsys-rep`: written by `nsys profile` (backend nsys)
        report.sqlite            REPORT_BASE + `.sqlite`: its export, made by `nsysmap run`
        rank0/, rank1/, ...      RANK_DIR: one capture directory per rank of a distributed
                                 job, holding the files above and
            rank.json            RANK_RECORD: a RankRecord, written by the process that
                                 waited for the rank (instrument/rank_guard.py, or the
                                 launcher that spawned it)

The record's fields are documented in docs/instrumentation.md (`launch.json`).
A reader takes the record as a JSON object and tolerates missing fields (a
launcher that died early writes none at all): `read_launch_record`.

Paths may name environment variables as Nsight Systems does, `%q{NAME}`
(`expand_env`): the same command line then gives every rank its own
directory, `RANK_DIR_TEMPLATE`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

CAPTURE_DIR = "capture"
LAUNCH_RECORD = "launch.json"
TRACE = "trace.json"
FLOPS = "flops.json"
COMPILED = "compiled.json"
REPORT_BASE = "report"
BACKENDS = ("nsys", "torch", "off")
RANK_RECORD = "rank.json"
RANK_DIR_TEMPLATE = "rank%q{RANK}"  # expanded by nsys, the launcher and the rank guard alike
_ENV_REFERENCE = re.compile(r"%q\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class CompileRecord:
    """launch.json's `compile`: torch.compile inside the run (docs/compile.md)."""

    compilations: int = 0
    profiled_compilations: int = 0
    profiled_compile_s: float = 0.0
    warmup_waited_steps: int = 0
    provenance: str | None = None  # COMPILED when the script compiled, else None


@dataclass(frozen=True)
class LaunchRecord:
    """launch.json: how the script ended and what was captured."""

    backend: str  # one of BACKENDS
    script: str
    argv: list[str]
    exit_status: int
    exception: str | None  # "Type: message" on one line
    interrupted: bool
    steps_seen: int
    profiled_steps: list[int] | None  # [first, last] of the completed steps profiled
    trace: str | None  # TRACE, relative to the capture directory, or None
    flops: str | None  # FLOPS when it was written, else None
    compile: CompileRecord
    torch_version: str
    cuda_device: str | None
    wall_s: float
    notes: list[str] = field(default_factory=list)
    rank: int | None = None  # the rank this process ran as ($RANK, or its spawn index)
    peak_rss_bytes: int | None = None  # the process's peak resident memory
    spawned: list[int] | None = None  # ranks it started with torch.multiprocessing.spawn
    child_processes: int = 0  # other processes it started (multiprocessing), not instrumented

    def to_json(self) -> dict[str, Any]:
        """The record as the JSON object launch.json holds."""
        return asdict(self)


LAUNCH_FIELDS = tuple(f.name for f in fields(LaunchRecord))


def write_launch_record(capture_dir: Path, record: LaunchRecord) -> Path:
    """Write capture_dir/launch.json; returns its path."""
    path = Path(capture_dir) / LAUNCH_RECORD
    path.write_text(json.dumps(record.to_json(), indent=2) + "\n")
    return path


def read_launch_record(capture_dir: Path) -> dict[str, Any]:
    """capture_dir/launch.json as a JSON object ({} when missing, unreadable or not one)."""
    return _json_object(Path(capture_dir) / LAUNCH_RECORD)


def _json_object(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def profiled_step_count(profiled: Any) -> int | None:
    """How many steps were profiled: the record holds [first, last], inclusive."""
    pair = isinstance(profiled, list) and len(profiled) == 2
    if pair and all(type(i) is int for i in profiled):
        return profiled[1] - profiled[0] + 1
    return None


def rank_dir(capture_dir: Path, rank: int) -> Path:
    """The capture directory of rank `rank` of a job."""
    return Path(capture_dir) / f"rank{rank}"


def expand_env(text: str, env: Mapping[str, str] | None = None) -> str:
    """`text` with each `%q{NAME}` replaced by environment variable NAME ("" when unset)."""
    values = os.environ if env is None else env
    return _ENV_REFERENCE.sub(lambda m: values.get(m.group(1), ""), text)


@dataclass(frozen=True)
class RankRecord:
    """rank.json: how one rank's training process ended, from the process that waited for it."""

    rank: int
    world_size: int
    local_rank: int | None
    job: str  # the same on every rank of one run; other runs' records are not read
    launched_by: str  # "torchrun" or "torch.multiprocessing.spawn"
    host: str
    pid: int | None  # the training process (or nsys, when nsys runs it)
    exit_status: int  # the script's status; 128 + N when killed by signal N
    signal: str | None  # "SIGKILL", ... when a signal ended it
    interrupted: bool  # the waiting process was asked to stop (SIGINT, SIGTERM)
    started_at: float  # Unix time
    ended_at: float
    peak_rss_bytes: int | None  # of the training process and what it ran

    def to_json(self) -> dict[str, Any]:
        """The record as the JSON object rank.json holds."""
        return asdict(self)


def write_rank_record(directory: Path, record: RankRecord) -> Path:
    """Write directory/rank.json at once (written aside, then renamed): never half a record."""
    path = Path(directory) / RANK_RECORD
    aside = path.with_name(f".{RANK_RECORD}.{os.getpid()}")
    aside.write_text(json.dumps(record.to_json(), indent=2) + "\n")
    os.replace(aside, path)
    return path


def read_rank_record(directory: Path) -> dict[str, Any]:
    """directory/rank.json as a JSON object ({} when missing, unreadable or not one)."""
    return _json_object(Path(directory) / RANK_RECORD)
