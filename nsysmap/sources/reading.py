"""Read, then normalise: the one place a profile file, or a part of one, becomes a
NestedProfile.

`load_profile` (public) reads a file of any kind of the table
(nsysmap.sources.input_kinds) whole; `whole_profile` does the same with the
file already checked and opened (nsysmap.sources.choose); `normalised_parts`
reads the parts of one file in turn (its processes, nsysmap.sources.by_process,
or its time windows, nsysmap.sources.by_window), op_id and range_id counting
on from one part to the next. Each read is timed as the stage `read`, each
nesting as `normalise`; the flow (nsysmap.flow.run_stages) runs the stages
after these.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from nsysmap.attribution.normalise import normalise
from nsysmap.core.profile import NestedProfile, Profile
from nsysmap.core.scalars import opt_int
from nsysmap.core.timings import Stages
from nsysmap.sources.input_kinds import InputKind, kind_of


def load_profile(
    path: str | Path, *, stages: Stages | None = None, memory_gb: float | None = None
) -> NestedProfile:
    """Read a profile of any supported kind and normalise it (read, then nest its ranges).

    `.sqlite` nsys exports, `.nsys-rep` reports (exported with `nsys export`
    next to the input), and torch.profiler traces (`.json`, `.json.gz`);
    a file whose first bytes say another kind than its name is read as that
    kind (nsysmap.sources.input_kinds). `memory_gb`: the memory budget (None:
    nsysmap.core.memory's default); a trace larger than it reads is refused.
    """
    path = Path(path)
    stages = stages or Stages(progress=False)
    return whole_profile(path, kind_of(path), None, stages, memory_gb)


def whole_profile(
    path: Path, kind: InputKind, opened: Any, stages: Stages, memory_gb: float | None = None
) -> NestedProfile:
    """The file `path` of `kind` (checked; `opened`: what the kind's `open` gave, or
    None) read whole within `memory_gb` and normalised, then the kind's step after
    normalising."""
    read = lambda: _read_raw(path, kind, opened, memory_gb)  # noqa: E731
    profile = read_normalised(read, stages, "reading")
    if kind.after_normalise is not None:  # torch.compile: kernels' modules, compile time
        profile = kind.after_normalise(profile, path)
    return profile


def _read_raw(
    path: Path, kind: InputKind, opened: Any = None, memory_gb: float | None = None
) -> Profile:
    """The raw profile (a function of its own, for bench/profile.py to time)."""
    return kind.read_raw(path, opened, memory_gb)


def read_normalised(
    read: Callable[[], Profile],
    stages: Stages,
    label: str,
    nested: Callable[[Profile, NestedProfile], None] | None = None,
) -> NestedProfile:
    """`read()` timed as the stage read (`label` on the progress line), then nested
    (normalise); `nested(raw, profile)` is told both before the raw one is let go."""
    with stages.stage("read", label):
        raw = read()
    with stages.stage("normalise", "nesting ranges"):
        profile = normalise(raw)
        if nested is not None:
            nested(raw, profile)
    return profile


@dataclass(frozen=True)
class Part:
    """One part of a file read apart: what the progress line says, how it is read
    (given where its op_id and range_id start), and what is told once it is nested."""

    label: str
    read: Callable[[tuple[int, int]], Profile]
    nested: Callable[[Profile, NestedProfile], None] | None = None


def normalised_parts(parts: Iterable[Part], stages: Stages) -> Iterator[NestedProfile]:
    """Each part in turn, read and normalised; op_id and range_id go on counting from
    one part to the next. Only one part is held at a time: the caller lets go of
    one before asking for the next."""
    first_ids = (0, 0)
    for part in parts:
        profile = read_normalised(partial(part.read, first_ids), stages, part.label, part.nested)
        first_ids = next_ids(profile, first_ids)
        yield profile
        del profile


def next_ids(profile: NestedProfile, first_ids: tuple[int, int]) -> tuple[int, int]:
    """Where the next part's op_id and range_id start (past every id of this one,
    the synthetic FSDP ranges that nesting added included)."""
    last_op, last_range = (
        opt_int(profile.ops["op_id"].max()),
        opt_int(profile.ranges["range_id"].max()),
    )
    return (
        first_ids[0] if last_op is None else max(first_ids[0], last_op + 1),
        first_ids[1] if last_range is None else max(first_ids[1], last_range + 1),
    )
