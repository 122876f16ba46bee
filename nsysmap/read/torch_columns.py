"""Checked trace events (`nsysmap.read.torch_events`) to typed Polars columns.

Every value is converted by type, never by trust: an argument of the wrong
type (text where an id belongs, `true` where a number belongs, an integer
beyond 64 bits) becomes null, so one odd event never stops a conversion.
"""

from __future__ import annotations

import json
import zlib
from functools import lru_cache
from typing import Any

import polars as pl

from nsysmap.read.torch_events import int_ok
from nsysmap.schemas import ColumnType

MAX_DIMS_DEPTH = 6  # "Input Dims" nest tensor lists at most a few levels deep


@lru_cache(maxsize=4096)
def text_id(value: str) -> int:
    """A deterministic integer for a pid or tid written as text.

    Digits read as the number ("7" -> 7); other text ("Spans", "stream 7")
    maps to a stable negative checksum below -1, apart from real ids and -1.
    """
    text = value.strip()
    if text.lstrip("-").isdigit() and int_ok(number := int(text)):
        return number
    return -2 - zlib.crc32(text.encode())


def ids(values: list[Any]) -> pl.Series:
    """pid/tid values (ints, or text in some traces) as Int64."""
    return pl.Series(
        [v if int_ok(v) or v is None else text_id(str(v)) for v in values],
        dtype=pl.Int64,
    )


def ns_from_us(values: list[Any]) -> pl.Series:
    """Microsecond values (decimal text or ints) to integer nanoseconds.

    "12.3456" -> 12346 (half up); exponent forms such as "1e-05" go through a
    float; anything unreadable or too large for Int64 is null.
    """
    text = pl.Series([None if v is None else str(v) for v in values], dtype=pl.String)
    whole = text.str.extract(r"^(\d{1,16})(?:\.\d*)?$", 1).cast(pl.Int64)
    frac = text.str.extract(r"^\d+\.(\d*)$", 1).fill_null("").str.pad_end(4, "0")
    exact = whole * 1000 + (frac.str.slice(0, 4).cast(pl.Int64) + 5) // 10
    scaled = text.cast(pl.Float64, strict=False) * 1000.0
    approx = scaled.round(0).cast(pl.Int64, strict=False)
    approx = pl.select(pl.when(scaled.abs() < 9.2e18).then(approx)).to_series()
    return pl.select(pl.when(whole.is_not_null()).then(exact).otherwise(approx)).to_series()


def event_frame(evs: list[dict[str, Any]]) -> pl.DataFrame:
    """name, cat (lower case), pid, tid, start_ns, end_ns of checked complete events."""
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
    """Each event's "args" object ({} when absent or not an object)."""
    return [a if isinstance(a := e.get("args"), dict) else {} for e in evs]


def arg_column(args: list[dict[str, Any]], key: str, dtype: ColumnType) -> pl.Series:
    """One argument across events as Int64 or List(Int64); anything else is null."""
    values = [a.get(key) for a in args]
    if dtype == pl.Int64:
        return pl.Series(key, [v if int_ok(v) else None for v in values], dtype=pl.Int64)
    ok = [v if isinstance(v, list) and all(int_ok(x) for x in v) else None for v in values]
    return pl.Series(key, ok, dtype=pl.List(pl.Int64))


def first_arg(args: list[dict[str, Any]], keys: tuple[str, ...]) -> pl.Series:
    """The first of `keys` present in each event's args, as Int64 (null otherwise)."""
    values = [next((a[k] for k in keys if k in a), None) for a in args]
    return pl.Series(keys[0], [v if int_ok(v) else None for v in values], dtype=pl.Int64)


def dims_text(value: Any) -> str | None:
    """`Input Dims` as compact text ("[[8, 128], []]"); None unless nested lists of ints."""
    return json.dumps(value) if isinstance(value, list) and _dims_ok(value, 1) else None


def _dims_ok(value: list[Any], depth: int) -> bool:
    if depth > MAX_DIMS_DEPTH:
        return False
    return all(int_ok(v) or (isinstance(v, list) and _dims_ok(v, depth + 1)) for v in value)


def text_arg(args: list[dict[str, Any]], key: str) -> pl.Series:
    """A text argument across events (null when absent or not text)."""
    return pl.Series(
        key, [v if isinstance(v := a.get(key), str) else None for a in args], dtype=pl.String
    )
