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

The record's fields are documented in docs/instrumentation.md (`launch.json`).
A reader takes the record as a JSON object and tolerates missing fields (a
launcher that died early writes none at all): `read_launch_record`.
"""

from __future__ import annotations

import json
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
    try:
        record = json.loads((Path(capture_dir) / LAUNCH_RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def profiled_step_count(profiled: Any) -> int | None:
    """How many steps were profiled: the record holds [first, last], inclusive."""
    pair = isinstance(profiled, list) and len(profiled) == 2
    if pair and all(type(i) is int for i in profiled):
        return profiled[1] - profiled[0] + 1
    return None
