"""The input kinds nsysmap reads: one row each, and the one place that tells them apart.

Each `InputKind` row says, for one kind of profile file, how it is
recognised (its name's suffixes, and a probe of its first bytes), what a
message calls it, how it is read (a reader imported only when used, which
returns a raw `Profile`), whether it is converted first (an `.nsys-rep`
report is exported to SQLite by nsys), whether it can be read in parts (one
process or one time window at a time) and opened once for all its reads
(an nsys export, probed once), and what is done once it is normalised
(torch traces: the compiled kernels' modules and the compile time).

Every other module asks this table: the sources of the flow
(nsysmap.sources.choose, nsysmap.sources.reading), several reports
(nsysmap.many.input_files) and `nsysmap run` (nsysmap.capture). Adding an
input kind is one reader module and one row (docs/architecture.md shows one).

Which kind a file is (`kind_of`): the kind its name says, unless its first
bytes fail that kind's probe and pass another's, which then wins (a trace
saved as `run.sqlite`, an export saved as `run.json`). A file that no probe
recognises is left to the kind its name says, or to an nsys export, whose
reader says in one line why it is not one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nsysmap.core.profile import NestedProfile, Profile
from nsysmap.read.nsys import nsys_tool
from nsysmap.read.regular_file import regular_file

if TYPE_CHECKING:
    from nsysmap.read.nsys.nsys_sqlite import Export

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
PROBE_BYTES = 64  # how much of a file the probes see


@dataclass(frozen=True)
class InputKind:
    """One kind of profile file nsysmap reads."""

    name: str
    suffixes: tuple[str, ...]  # lower case, with the dot
    called: str  # what a message calls a file of this kind ("a torch.profiler trace")
    # The raw profile, of the path or of what `open` gave, read within a memory budget
    # in GB (None: nsysmap.core.memory's default); imports its reader when called.
    read: Callable[[Any, float | None], Profile]
    probe: Callable[[bytes], bool] | None = None  # the file's first bytes look like this kind
    # Converted first: into the file beside it with the suffix `converted` (then read)
    convert: Callable[[Path, Path], Path] | None = None
    converted: str = ""
    # Can be read in parts, one process or one time window at a time (nsysmap.sources.choose)
    by_process: bool = False
    # Opened once, its path already checked (an nsys export probed once): what `read`
    # and the reads by process or window are then given instead of the path.
    open: Callable[[Path], Any] | None = None
    # Once normalised: what this kind adds (the input's path given too).
    after_normalise: Callable[[NestedProfile, Path], NestedProfile] | None = None

    def named(self, path: Path) -> bool:
        """Does `path`'s name end with one of this kind's suffixes?"""
        return path.name.lower().endswith(self.suffixes)

    def read_raw(self, path: Path, opened: Any = None, memory_gb: float | None = None) -> Profile:
        """The raw profile of `path` (or of `opened`, what `open` gave for it), converted
        first when this kind is, within the memory budget `memory_gb`."""
        if opened is not None:
            return self.read(opened, memory_gb)
        if self.convert is not None:
            path = self.convert(path, path.with_suffix(self.converted))
        return self.read(path, memory_gb)


def _is_sqlite(head: bytes) -> bool:
    return head.startswith(SQLITE_MAGIC)


def _is_json_or_gzip(head: bytes) -> bool:
    """gzip's magic, or JSON's first character (an object or an array) after blanks."""
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    return head.startswith(GZIP_MAGIC) or text[:1] in (b"{", b"[")


def _read_sqlite(source: Path | Export, memory_gb: float | None) -> Profile:
    """(The budget decides how an export is read: nsysmap.sources.choose.)"""
    from nsysmap.read.nsys.nsys_sqlite import read_sqlite

    return read_sqlite(source)


def _open_sqlite(path: Path) -> Export:
    from nsysmap.read.nsys.nsys_sqlite import open_export

    # Nothing the flow writes holds the kernels' grid and block: not read (a third
    # of the kernel table's read); `load_profile` reads them.
    return open_export(path, checked=True, launch_geometry=False)


def _read_trace(path: Path, memory_gb: float | None) -> Profile:
    from nsysmap.read.torch.torch_trace import read_trace

    return read_trace(path, memory_gb=memory_gb)


def _exported(path: Path, out: Path) -> Path:
    """An nsys report exported to the SQLite file `out` (by nsys)."""
    return nsys_tool.export_sqlite(path, out)


def _compiled(profile: NestedProfile, path: Path) -> NestedProfile:
    """torch.compile: the compiled kernels' modules (compiled.json beside the trace)
    and the compile time."""
    from nsysmap.attribution.compile_time import with_compile_facts
    from nsysmap.read.torch.compiled_json import attach_compiled

    return with_compile_facts(attach_compiled(profile, path))


NSYS_SQLITE = InputKind(
    "nsys-sqlite",
    (".sqlite",),
    "an nsys .sqlite export",
    _read_sqlite,
    probe=_is_sqlite,
    by_process=True,
    open=_open_sqlite,
)
NSYS_REPORT = InputKind(
    "nsys-report",
    nsys_tool.REPORT_SUFFIXES,  # what nsys writes
    "an nsys report",
    _read_sqlite,
    convert=_exported,
    converted=".sqlite",
)
TORCH_TRACE = InputKind(
    "torch-trace",
    (".json", ".json.gz"),
    "a torch.profiler trace",
    _read_trace,
    probe=_is_json_or_gzip,
    after_normalise=_compiled,
)
KINDS: tuple[InputKind, ...] = (NSYS_SQLITE, NSYS_REPORT, TORCH_TRACE)
FALLBACK = NSYS_SQLITE  # a file no name nor probe recognises: its reader says why not


def named_kind(path: Path) -> InputKind | None:
    """The kind `path`'s name says, if any."""
    return next((kind for kind in KINDS if kind.named(path)), None)


def called(path: Path) -> str:
    """What a file of this name should be, for messages."""
    return (named_kind(path) or FALLBACK).called


def suffixes() -> tuple[str, ...]:
    """Every suffix of every kind."""
    return tuple(suffix for kind in KINDS for suffix in kind.suffixes)


def converted_name(path: Path) -> str | None:
    """The name of the file `path` is converted to before it is read (`x.sqlite` for
    an nsys report `x.nsys-rep`), or None when it is read as it is."""
    kind = named_kind(path)
    return None if kind is None or kind.convert is None else path.with_suffix(kind.converted).name


def kind_of(path: Path) -> InputKind:
    """The kind of the regular file `path`: its name's, unless its first bytes say
    another kind (see the module's docstring)."""
    named = named_kind(path)
    head = _head(regular_file(path, (named or FALLBACK).called))
    if named is not None and (named.probe is None or named.probe(head)):
        return named
    found = next((kind for kind in KINDS if kind.probe is not None and kind.probe(head)), None)
    return found or named or FALLBACK


def _head(path: Path) -> bytes:
    """The first PROBE_BYTES of `path` (none when it cannot be read: the reader says why)."""
    try:
        with path.open("rb") as stream:
            return stream.read(PROBE_BYTES)
    except OSError:
        return b""
