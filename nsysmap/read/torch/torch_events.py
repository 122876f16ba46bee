"""Chrome trace-event JSON (as torch.profiler writes it) to checked Python events.

The I/O half of `nsysmap.read.torch.torch_trace`: parse the file once with the standard
library and sort the events into families by category in a single pass,
checking on the way the fields every later step relies on (`ts`, `dur`, `pid`,
`tid`, flow `id`). An event whose field cannot be read is skipped and counted
(`Skipped`), never half-used; an `args` that is not an object is ignored and
counted. Nothing here knows what a kernel or a range means;
`nsysmap.read.torch.torch_columns` turns the checked events into typed columns.

Times in a trace are microseconds written with nanosecond decimals; numbers
are kept as their decimal text while parsing (`Number`) so that they convert
to integer nanoseconds exactly (a double holds an epoch-sized microsecond
value only to about 1 ns).
"""

from __future__ import annotations

import gc
import json
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsysmap.core.errors import DamagedTimes, InputNotFound, InputTooLarge, NotAProfile
from nsysmap.core.memory import budget_bytes
from nsysmap.read.torch.inflate import Damaged, PastLimit, inflated

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

# Peak resident memory per byte of (inflated) trace: 7.11 GB for a 1.02 GB trace
# read the general way (docs/performance.md); a larger trace than the memory
# budget over this is refused before it is read (`decompressed`).
TRACE_BYTES_PER_BYTE = 7
# Microseconds beyond this magnitude do not fit Int64 nanoseconds with margin
# (about 285 years after 1970).
MAX_US = 9 * 10**15
_DECIMAL = re.compile(r"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")


class Number(str):
    """A JSON number with a fraction or exponent, kept as its decimal text."""


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off for the block, as it was after it.

    A parsed trace is millions of dicts and lists without a reference cycle;
    with the collector on, each generation-2 pass walks all of them again
    (measured: parsing 298 MB took 13.4 s with it, 5.2 s without).
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def decompressed(path: Path, memory_gb: float | None = None) -> bytes:
    """The trace file's bytes, gunzipped when gzipped, as many as the memory budget
    reads (`memory_gb`, None: the default of nsysmap.core.memory): at most the budget over
    TRACE_BYTES_PER_BYTE, inflated as a stream that stops there.

    Raises InputNotFound, NotAProfile or InputTooLarge with a one-line message.
    """
    budget = budget_bytes(memory_gb)
    limit = None if budget is None else int(budget / TRACE_BYTES_PER_BYTE)
    try:
        return inflated(_regular(path), limit)
    except PastLimit as exc:
        raise InputTooLarge(
            f"{path}: holds more than {exc.limit / 1e9:.2f} GB of trace (inflated), more than "
            f"a memory budget of {(budget or 0) / 1e9:.1f} GB can read at about "
            f"{TRACE_BYTES_PER_BYTE} bytes per byte of trace; give a larger one with --memory-gb"
        ) from None
    except Damaged as exc:
        raise NotAProfile(f"{path}: {exc.reason}, not a readable chrome trace") from None
    except FileNotFoundError as exc:
        raise InputNotFound(f"{path}: no such file") from exc
    except OSError as exc:
        raise InputNotFound(f"{path}: cannot be read ({exc.strerror})") from exc


def parse_events(path: Path, raw: bytes) -> tuple[dict[str, Any], list[Any]]:
    """The trace's header fields and its event list, parsed from its (gunzipped) bytes.

    Raises NotAProfile with a one-line message.
    """
    try:
        doc = json.loads(json_text(raw), parse_float=Number)  # decimal text: see ns_from_us
    except RecursionError as exc:
        raise NotAProfile(f"{path}: JSON nested too deeply to be a chrome trace") from exc
    except ValueError as exc:
        raise NotAProfile(f"{path}: not a JSON chrome trace ({type(exc).__name__})") from exc
    if isinstance(doc, list):  # the bare-array form of the trace event format
        if doc and not any(isinstance(event, dict) and "ph" in event for event in doc):
            # A list of other records (a catalogue of files, say): not a trace at all.
            reason = "a JSON array without trace events (none has a ph field)"
            raise NotAProfile(f"{path}: {reason}, not a chrome trace")
        return {}, doc
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        return doc, doc["traceEvents"]
    raise NotAProfile(f"{path}: JSON without a traceEvents list, not a chrome trace")


# One JSON escape: a surrogate pair, a lone surrogate (group 1), or any other escape
# (consumed whole, so that an escaped backslash never starts a false match).
_ESCAPE = re.compile(
    r"\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    r"|(u[dD][89a-fA-F][0-9a-fA-F]{2})|.)",
    re.S,
)


def json_text(raw: bytes) -> str:
    """The trace's text for `json.loads`, with what Polars cannot hold replaced by U+FFFD:
    bytes that are not UTF-8 (as the nsys reader replaces them) and escapes of lone
    UTF-16 surrogates (`\\ud800`), which no UTF-8 string holds."""
    encoding = json.detect_encoding(raw)
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError:
        text = raw.decode(encoding, "replace")
    if "\\ud" in text or "\\uD" in text:
        text = _ESCAPE.sub(lambda m: "\\ufffd" if m.group(1) else m.group(0), text)
    return text


def _regular(path: Path) -> Path:
    """`path`, once it is a regular file (a FIFO would block the first read forever)."""
    if not stat.S_ISREG(path.stat().st_mode):
        raise InputNotFound(f"{path}: not a regular file")
    return path


@dataclass
class Skipped:
    """Events left out because a field could not be read, by field, with a first example."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)
    args_ignored: int = 0  # events whose "args" was not an object (kept, args unused)
    gpu: int = 0  # of them, GPU operations (kernels, copies, fills)
    negative: int = 0  # events with a negative dur: not skipped, the trace is refused
    negative_example: str = ""

    def add(self, what: str, ev: dict[str, Any], value: Any) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1
        self.gpu += FAMILIES.get(str(ev.get("cat", "")).lower()) == "gpu"
        if what not in self.examples:
            name = str(ev.get("name", ""))[:60]
            self.examples[what] = f"{name!r} has {_short(value)}"

    def add_negative(self, ev: dict[str, Any], value: Any) -> None:
        self.negative += 1
        if not self.negative_example:
            self.negative_example = f"{ev.get('cat')} {str(ev.get('name', ''))[:60]!r} has {value}"

    def check_durations(self, path: Path) -> None:
        """Refuse a trace with events that end before they start (a negative `dur`)."""
        n = self.negative
        if n:
            what = f"{n:,} trace events end" if n > 1 else "1 trace event ends"
            raise DamagedTimes(
                f"{path}: {what} before {'they start' if n > 1 else 'it starts'}, a negative "
                f"dur (first: {self.negative_example}); the trace is damaged"
            )

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
    """One pass: checked complete events and flows by family, and thread-name events.

    The common case (a text category, `ts` and `dur` parsed as `Number` or
    int, a pid and a tid) is checked inline; anything else goes through the
    same checks one by one (`_complete_ok`), so both count the same skips.
    """
    buckets: Buckets = {f: [] for f in {*FAMILIES.values(), *FLOW_FAMILIES.values()}}
    add = {f: bucket.append for f, bucket in buckets.items()}
    threads: list[dict[str, Any]] = []
    skipped = Skipped()
    families: dict[str, str | None] = {}  # category as written -> family
    for ev in events:
        if type(ev) is not dict:
            continue
        ph = ev.get("ph")
        if ph == "X":
            cat = ev.get("cat", "")
            if type(cat) is str:
                fam = families.get(cat, "")
                if fam == "":
                    fam = families[cat] = FAMILIES.get(cat.lower())
            else:
                fam = FAMILIES.get(str(cat).lower())
            if fam is None or (fam == "module" and not _is_module_frame(ev)):
                continue
            if _fast_ok(ev) or _complete_ok(ev, skipped):
                add[fam](ev)
        elif ph in ("s", "f"):
            cat = ev.get("cat", "")
            fam = FLOW_FAMILIES.get(cat.lower() if type(cat) is str else str(cat).lower())
            if fam is not None and (_fast_flow_ok(ev) or _flow_ok(ev, skipped)):
                add[fam](ev)
        elif ph == "M" and ev.get("name") == "thread_name" and _ids_ok(ev, skipped):
            threads.append(ev)
    return buckets, threads, skipped


def _fast_ok(ev: dict[str, Any]) -> bool:
    """`_complete_ok` for the usual event, without counting: True only when every
    check passes and nothing is to be counted; False means "check it one by one"."""
    ts, dur, args = ev.get("ts"), ev.get("dur"), ev.get("args")
    return (
        (type(args) is dict or args is None)
        and ev.get("pid") is not None
        and ev.get("tid") is not None
        and (
            (type(ts) is Number and abs(float(ts)) < MAX_US)
            or (type(ts) is int and -MAX_US < ts < MAX_US)
        )
        and (
            (type(dur) is Number and dur[0] != "-" and float(dur) < MAX_US)
            or (type(dur) is int and 0 <= dur < MAX_US)
        )
    )


def _fast_flow_ok(ev: dict[str, Any]) -> bool:
    """`_flow_ok` for the usual flow event: True only when every check passes."""
    ts, flow_id = ev.get("ts"), ev.get("id")
    return (
        type(flow_id) is int
        and -(2**63) <= flow_id < 2**63
        and ev.get("pid") is not None
        and ev.get("tid") is not None
        and (
            (type(ts) is Number and abs(float(ts)) < MAX_US)
            or (type(ts) is int and -MAX_US < ts < MAX_US)
        )
    )


def _is_module_frame(ev: dict[str, Any]) -> bool:
    name = ev.get("name")
    return isinstance(name, str) and name.startswith(MODULE_PREFIX)


def _complete_ok(ev: dict[str, Any], skipped: Skipped) -> bool:
    """A complete event ("X") has a readable ts, a non-negative dur, a pid and a tid."""
    if not _ts_ok(ev, skipped):
        return False
    if not time_ok(dur := ev.get("dur")):
        skipped.add("dur not a number", ev, dur)
        return False
    if _negative(dur):
        skipped.add_negative(ev, dur)
        return False
    if "args" in ev and not isinstance(ev["args"], dict) and ev["args"] is not None:
        skipped.args_ignored += 1
    return _ids_ok(ev, skipped)


def _flow_ok(ev: dict[str, Any], skipped: Skipped) -> bool:
    if not _ts_ok(ev, skipped):
        return False
    if not int_ok(flow_id := ev.get("id")):
        skipped.add("flow id not an integer", ev, flow_id)
        return False
    return _ids_ok(ev, skipped)


def _ts_ok(ev: dict[str, Any], skipped: Skipped) -> bool:
    """An event's ts is a readable time; counted as skipped when it is not."""
    if time_ok(ts := ev.get("ts")):
        return True
    skipped.add("ts not a number", ev, ts)
    return False


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
    """Below zero (a checked time: an int or decimal text; "-0.0" is zero)."""
    return bool(value < 0) if type(value) is int else float(value) < 0


def int_ok(value: Any) -> bool:
    """An integer that fits Int64 (JSON true/false are not integers)."""
    return type(value) is int and -(2**63) <= value < 2**63
