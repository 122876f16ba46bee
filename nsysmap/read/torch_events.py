"""Chrome trace-event JSON (as torch.profiler writes it) to Polars columns.

The I/O half of `nsysmap.read.torch_trace`: parse the file once with the standard
library, sort the complete events ("ph": "X") into families by category in a
single pass, and turn lists of events into typed columns. Nothing here knows
what a kernel or a range means.

Times in a trace are microseconds written with nanosecond decimals; numbers
are kept as their decimal text while parsing so that they convert to integer
nanoseconds exactly (a double holds an epoch-sized microsecond value only to
about 1 ns).
"""

from __future__ import annotations

import gzip
import json
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap.errors import InputNotFound, NotAnExport

# Event category (lower-cased) -> family. Older torch releases wrote
# "Operator", "Runtime", "Kernel", "Memcpy", "Memset".
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
}
Buckets = dict[str, list[dict[str, Any]]]


def load_events(path: Path) -> tuple[dict[str, Any], list[Any]]:
    """The trace's header fields and its event list (plain or gzipped JSON).

    Raises InputNotFound or NotAnExport with a one-line message.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise InputNotFound(f"{path}: no such file") from exc
    except OSError as exc:
        raise InputNotFound(f"{path}: cannot be read ({exc.strerror})") from exc
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = json.loads(raw, parse_float=str)  # decimal text: see ns_from_us
    except (OSError, EOFError, ValueError) as exc:
        raise NotAnExport(f"{path}: not a JSON chrome trace ({type(exc).__name__})") from exc
    if isinstance(doc, list):  # the bare-array form of the trace event format
        return {}, doc
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        return doc, doc["traceEvents"]
    raise NotAnExport(f"{path}: JSON without a traceEvents list, not a chrome trace")


def split_events(events: list[Any]) -> tuple[Buckets, list[dict[str, Any]]]:
    """One pass: complete events by family, and the thread-name metadata events."""
    buckets: Buckets = {"range": [], "cpu": [], "gpu": [], "api": []}
    threads: list[dict[str, Any]] = []
    family = FAMILIES.get
    for ev in events:
        if not isinstance(ev, dict):
            continue
        ph = ev.get("ph")
        if ph == "X":
            fam = family(str(ev.get("cat", "")).lower())
            if fam is not None:
                buckets[fam].append(ev)
        elif ph == "M" and ev.get("name") == "thread_name":
            threads.append(ev)
    return buckets, threads


@lru_cache(maxsize=4096)
def text_id(value: str) -> int:
    """A deterministic integer for a pid or tid written as text.

    Digits read as the number ("7" -> 7); other text ("Spans", "stream 7")
    maps to a stable negative checksum below -1, apart from real ids and -1.
    """
    text = value.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    return -2 - zlib.crc32(text.encode())


def ids(values: list[Any]) -> pl.Series:
    """pid/tid values (ints, or text in some traces) as Int64."""
    return pl.Series(
        [v if isinstance(v, int) or v is None else text_id(str(v)) for v in values],
        dtype=pl.Int64,
    )


def ns_from_us(values: list[Any]) -> pl.Series:
    """Microsecond values (decimal text or ints) to integer nanoseconds.

    "12.3456" -> 12346 (half up); exponent forms such as "1e-05" go through a
    float; anything unreadable is null.
    """
    text = pl.Series(values, dtype=pl.String, strict=False)
    whole = text.str.extract(r"^(\d+)(?:\.\d*)?$", 1).cast(pl.Int64)
    frac = text.str.extract(r"^\d+\.(\d*)$", 1).fill_null("").str.pad_end(4, "0")
    exact = whole * 1000 + (frac.str.slice(0, 4).cast(pl.Int64) + 5) // 10
    approx = (text.cast(pl.Float64, strict=False) * 1000.0).round(0).cast(pl.Int64)
    return pl.select(pl.when(whole.is_not_null()).then(exact).otherwise(approx)).to_series()


def event_frame(evs: list[dict[str, Any]]) -> pl.DataFrame:
    """name, cat (lower case), pid, tid, start_ns, end_ns of complete events."""
    start = ns_from_us([e.get("ts") for e in evs])
    dur = ns_from_us([e.get("dur", 0) for e in evs]).fill_null(0).clip(lower_bound=0)
    return pl.DataFrame(
        {
            "name": pl.Series([str(e.get("name", "")) for e in evs], dtype=pl.String),
            "cat": pl.Series([str(e.get("cat", "")).lower() for e in evs], dtype=pl.String),
            "pid": ids([e.get("pid") for e in evs]),
            "tid": ids([e.get("tid") for e in evs]),
            "start_ns": start,
            "end_ns": start + dur,
        }
    )


def args_of(evs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each event's "args" object ({} when absent)."""
    return [e.get("args") or {} for e in evs]


def arg_column(args: list[dict[str, Any]], key: str, dtype: pl.DataType) -> pl.Series:
    """One argument across events; missing or unconvertible values are null."""
    return pl.Series(key, [a.get(key) for a in args], dtype=dtype, strict=False)
