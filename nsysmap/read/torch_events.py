"""Chrome trace-event JSON (as torch.profiler writes it) to checked Python events.

The I/O half of `nsysmap.read.torch_trace`: parse the file once with the standard
library and sort the events into families by category in a single pass,
checking on the way the fields every later step relies on (`ts`, `dur`, `pid`,
`tid`, flow `id`). An event whose field cannot be read is skipped and counted
(`Skipped`), never half-used; an `args` that is not an object is ignored and
counted. Nothing here knows what a kernel or a range means;
`nsysmap.read.torch_columns` turns the checked events into typed columns.

Times in a trace are microseconds written with nanosecond decimals; numbers
are kept as their decimal text while parsing (`Number`) so that they convert
to integer nanoseconds exactly (a double holds an epoch-sized microsecond
value only to about 1 ns).
"""

from __future__ import annotations

import gzip
import json
import re
import stat
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsysmap.errors import InputNotFound, NotAnExport

# Event category (lower-cased) -> family. Older torch releases wrote
# "Operator", "Runtime", "Kernel", "Memcpy", "Memset". gpu_user_annotation
# (the GPU-side copy of an annotation) is counted apart, never a GPU operation.
FAMILIES = {
    "user_annotation": "range",
    "cpu_op": "cpu",
    "operator": "cpu",
    "kernel": "gpu",
    "gpu_memcpy": "gpu",
    "gpu_memset": "gpu",
    "memcpy": "gpu",
    "memset": "gpu",
    "cuda_runtime": "api",
    "cuda_driver": "api",
    "runtime": "api",
    "python_function": "module",  # only the module frames are kept
    "gpu_user_annotation": "gpu_annotation",
}
# Flow events ("ph" "s" / "f") by category: forward -> backward operator links,
# and launch -> GPU op links (ac2g; "async" in old traces).
FLOW_FAMILIES = {"fwdbwd": "fwdbwd", "ac2g": "launch_flow", "async": "launch_flow"}
MODULE_PREFIX = "nn.Module: "
Buckets = dict[str, list[dict[str, Any]]]

# Microseconds beyond this magnitude do not fit Int64 nanoseconds with margin
# (about 285 years after 1970).
MAX_US = 9 * 10**15
_DECIMAL = re.compile(r"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")


class Number(str):
    """A JSON number with a fraction or exponent, kept as its decimal text."""


def load_events(path: Path) -> tuple[dict[str, Any], list[Any]]:
    """The trace's header fields and its event list (plain or gzipped JSON).

    Raises InputNotFound or NotAnExport with a one-line message.
    """
    raw = _read_bytes(path)
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = json.loads(raw, parse_float=Number)  # decimal text: see ns_from_us
    except RecursionError as exc:
        raise NotAnExport(f"{path}: JSON nested too deeply to be a chrome trace") from exc
    except zlib.error as exc:  # a corrupt deflate stream inside a valid gzip header
        raise NotAnExport(f"{path}: a corrupt gzip stream, not a readable chrome trace") from exc
    except (OSError, EOFError, ValueError) as exc:
        raise NotAnExport(f"{path}: not a JSON chrome trace ({type(exc).__name__})") from exc
    if isinstance(doc, list):  # the bare-array form of the trace event format
        return {}, doc
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        return doc, doc["traceEvents"]
    raise NotAnExport(f"{path}: JSON without a traceEvents list, not a chrome trace")


def _read_bytes(path: Path) -> bytes:
    """The file's bytes; only a regular file is read (a FIFO would block forever)."""
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise InputNotFound(f"{path}: not a regular file")
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise InputNotFound(f"{path}: no such file") from exc
    except OSError as exc:
        raise InputNotFound(f"{path}: cannot be read ({exc.strerror})") from exc


@dataclass
class Skipped:
    """Events left out because a field could not be read, by field, with a first example."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)
    args_ignored: int = 0  # events whose "args" was not an object (kept, args unused)
    gpu: int = 0  # of them, GPU operations (kernels, copies, fills)

    def add(self, what: str, ev: dict[str, Any], value: Any) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1
        self.gpu += FAMILIES.get(str(ev.get("cat", "")).lower()) == "gpu"
        if what not in self.examples:
            name = str(ev.get("name", ""))[:60]
            self.examples[what] = f"{name!r} has {_short(value)}"

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def describe(self) -> str | None:
        """One line: how many events were skipped and why (None when none were)."""
        if not self.total:
            return None
        parts = [
            f"{n} with {what} (first: {self.examples[what]})" for what, n in self.counts.items()
        ]
        events = "event" if self.total == 1 else "events"
        return f"{self.total} trace {events} skipped: " + "; ".join(parts)


def _short(value: Any) -> str:
    text = "no value" if value is None else f"{type(value).__name__} {value!r}"
    return text if len(text) <= 40 else text[:37] + "..."


def split_events(events: list[Any]) -> tuple[Buckets, list[dict[str, Any]], Skipped]:
    """One pass: checked complete events and flows by family, and thread-name events."""
    buckets: Buckets = {f: [] for f in {*FAMILIES.values(), *FLOW_FAMILIES.values()}}
    threads: list[dict[str, Any]] = []
    skipped = Skipped()
    for ev in events:
        if not isinstance(ev, dict):
            continue
        ph = ev.get("ph")
        if ph == "X":
            fam = FAMILIES.get(str(ev.get("cat", "")).lower())
            if fam is None or (fam == "module" and not _is_module_frame(ev)):
                continue
            if _complete_ok(ev, skipped):
                buckets[fam].append(ev)
        elif ph in ("s", "f"):
            fam = FLOW_FAMILIES.get(str(ev.get("cat", "")).lower())
            if fam is not None and _flow_ok(ev, skipped):
                buckets[fam].append(ev)
        elif ph == "M" and ev.get("name") == "thread_name" and _ids_ok(ev, skipped):
            threads.append(ev)
    return buckets, threads, skipped


def _is_module_frame(ev: dict[str, Any]) -> bool:
    name = ev.get("name")
    return isinstance(name, str) and name.startswith(MODULE_PREFIX)


def _complete_ok(ev: dict[str, Any], skipped: Skipped) -> bool:
    """A complete event ("X") has a readable ts, a non-negative dur, a pid and a tid."""
    if not time_ok(ts := ev.get("ts")):
        skipped.add("ts not a number", ev, ts)
        return False
    if not time_ok(dur := ev.get("dur")) or _negative(dur):
        skipped.add("dur not a non-negative number", ev, dur)
        return False
    if "args" in ev and not isinstance(ev["args"], dict) and ev["args"] is not None:
        skipped.args_ignored += 1
    return _ids_ok(ev, skipped)


def _flow_ok(ev: dict[str, Any], skipped: Skipped) -> bool:
    if not time_ok(ts := ev.get("ts")):
        skipped.add("ts not a number", ev, ts)
        return False
    if not int_ok(flow_id := ev.get("id")):
        skipped.add("flow id not an integer", ev, flow_id)
        return False
    return _ids_ok(ev, skipped)


def _ids_ok(ev: dict[str, Any], skipped: Skipped) -> bool:
    for key in ("pid", "tid"):
        if ev.get(key) is None:
            skipped.add(f"no {key}", ev, None)
            return False
    return True


def time_ok(value: Any) -> bool:
    """A time in microseconds nsysmap can convert: an int, or decimal text, of sane size."""
    kind = type(value)
    if kind is int:
        return bool(-MAX_US < value < MAX_US)
    if kind is Number or (kind is str and _DECIMAL.fullmatch(value)):
        return abs(float(value)) < MAX_US  # "1e400" -> inf
    return False


def _negative(value: Any) -> bool:
    return value < 0 if type(value) is int else str(value).startswith("-")


def int_ok(value: Any) -> bool:
    """An integer that fits Int64 (JSON true/false are not integers)."""
    return type(value) is int and -(2**63) <= value < 2**63
