"""The flow's first two stages: read a profile of any supported kind, then normalise it.

The input's kind comes from its name: nsys SQLite exports (`.sqlite`), nsys
reports (`.nsys-rep`, `.qdrep`, exported with `nsys export` first) and
torch.profiler traces (`.json`, `.json.gz`). `nsysmap.pipeline` runs the
stages after these.
"""

from __future__ import annotations

from pathlib import Path

from nsysmap.attribution.normalise import normalise
from nsysmap.profile import NestedProfile, Profile
from nsysmap.read.regular_file import regular_file
from nsysmap.stages import Stages

TRACE_SUFFIXES = (".json", ".json.gz")


def load_profile(path: str | Path, *, stages: Stages | None = None) -> NestedProfile:
    """Read a profile of any supported kind and normalise it (read, then nest its ranges).

    `.sqlite` nsys exports, `.nsys-rep` reports (exported with `nsys export`
    next to the input), and torch.profiler traces (`.json`, `.json.gz`).
    """
    path = regular_file(path, expected_kind(Path(path)))
    stages = stages or Stages(progress=False)
    with stages.stage("read", "reading"):
        raw = _read_raw(path)
    with stages.stage("normalise", "nesting ranges"):
        profile = normalise(raw)
    if path.name.lower().endswith(TRACE_SUFFIXES):  # torch.compile: kernels' modules, compile time
        from nsysmap.attribution.compile_time import with_compile_facts
        from nsysmap.read.compiled_json import attach_compiled

        profile = with_compile_facts(attach_compiled(profile, path))
    return profile


def expected_kind(path: Path) -> str:
    """What a file of this name should be, for messages."""
    name = path.name.lower()
    if name.endswith(TRACE_SUFFIXES):
        return "a torch.profiler trace"
    if name.endswith((".nsys-rep", ".qdrep")):
        return "an nsys report"
    return "an nsys .sqlite export"


def _read_raw(path: Path) -> Profile:
    name = path.name.lower()
    if name.endswith(TRACE_SUFFIXES):
        from nsysmap.read.torch_trace import read_trace

        return read_trace(path)
    if name.endswith(".nsys-rep") or name.endswith(".qdrep"):
        from nsysmap.nsys_tool import export_sqlite

        path = export_sqlite(path, path.with_suffix(".sqlite"))
    from nsysmap.read.nsys_sqlite import read_sqlite

    return read_sqlite(path)
