"""The flow's first two stages: read a profile of any supported kind, then normalise it.

The input's kind, how it is read and what follows its normalisation come
from the one table of input kinds (nsysmap.input_kinds): nsys SQLite
exports, nsys reports (exported with `nsys export` first) and
torch.profiler traces. `nsysmap.flow` runs the stages after these.
"""

from __future__ import annotations

from pathlib import Path

from nsysmap.attribution.normalise import normalise
from nsysmap.input_kinds import InputKind, kind_of
from nsysmap.profile import NestedProfile, Profile
from nsysmap.stages import Stages


def load_profile(
    path: str | Path, *, stages: Stages | None = None, memory_gb: float | None = None
) -> NestedProfile:
    """Read a profile of any supported kind and normalise it (read, then nest its ranges).

    `.sqlite` nsys exports, `.nsys-rep` reports (exported with `nsys export`
    next to the input), and torch.profiler traces (`.json`, `.json.gz`);
    a file whose first bytes say another kind than its name is read as that
    kind (nsysmap.input_kinds). `memory_gb`: the memory budget (None: 80 % of
    what is available, nsysmap.memory); a trace larger than it reads is refused.
    """
    path = Path(path)
    kind = kind_of(path)
    stages = stages or Stages(progress=False)
    with stages.stage("read", "reading"):
        raw = _read_raw(path, kind, memory_gb)
    with stages.stage("normalise", "nesting ranges"):
        profile = normalise(raw)
    if kind.after_normalise is not None:  # torch.compile: kernels' modules, compile time
        profile = kind.after_normalise(profile, path)
    return profile


def _read_raw(path: Path, kind: InputKind, memory_gb: float | None = None) -> Profile:
    """The raw profile (a function of its own, for bench/profile.py to time)."""
    return kind.read_raw(path, memory_gb)
