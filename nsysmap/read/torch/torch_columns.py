"""Checked trace events (`nsysmap.read.torch.torch_events`) to typed Polars columns.

Every value is converted by type, never by trust: an argument of the wrong
type (text where an id belongs, `true` where a number belongs, an integer
beyond 64 bits) becomes null, so one odd event never stops a conversion.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from functools import lru_cache
from itertools import repeat
from operator import itemgetter
from typing import Any

import polars as pl

from nsysmap.read.torch.torch_events import Number, int_ok

MAX_DIMS_DEPTH = 6  # "Input Dims" nest tensor lists at most a few levels deep
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1  # int_ok's bounds, inlined in the hot loops
_INT_OR_NONE = {int, type(None)}
_TEXT_OR_NONE = {Number, str, type(None)}
_CHECKED = ("ts", "dur", "pid", "tid", "cat")  # present in every checked event
_INT_LIST = r"^\[(?:-?\d+(?:, -?\d+)*)?\]$"  # the repr of a flat list of ints
_DIMS_CHARS = r"^\[[\[\], 0-9-]*\]$"  # the repr of nested lists of ints, and only that
_NS_TEXT = r"^\d{1,16}\.\d{3}$"  # microseconds written to the nanosecond


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


def _plain_ints(name: str, values: Sequence[Any]) -> pl.Series | None:
    """`values` as Int64 when each is None or an int that fits (checked in C); else None."""
    if set(map(type, values)) <= _INT_OR_NONE:  # the usual case
        try:
            return pl.Series(name, values, dtype=pl.Int64)
        except (TypeError, OverflowError):  # beyond Int64: the caller's general path
            pass
    return None


def ids(values: Sequence[Any]) -> pl.Series:
    """pid/tid values (ints, or text in some traces) as Int64."""
    if (plain := _plain_ints("", values)) is not None:
        return plain
    return pl.Series(
        [
            v if v is None or (type(v) is int and _I64_MIN <= v <= _I64_MAX) else text_id(str(v))
            for v in values
        ],
        dtype=pl.Int64,
    )


def int_series(name: str, values: Sequence[Any]) -> pl.Series:
    """Each value as Int64 if it is an integer that fits (`int_ok`), else null."""
    if (plain := _plain_ints(name, values)) is not None:
        return plain
    return pl.Series(name, int_values(values), dtype=pl.Int64)


def int_values(values: Sequence[Any]) -> list[int | None]:
    """Each value if it is an integer that fits Int64 (`int_ok`), else None."""
    return [v if type(v) is int and _I64_MIN <= v <= _I64_MAX else None for v in values]


def ns_from_us(values: Sequence[Any]) -> pl.Series:
    """Microsecond values (decimal text or ints) to integer nanoseconds.

    "12.3456" -> 12346 (half up); exponent forms such as "1e-05" go through a
    float; anything unreadable or too large for Int64 is null.
    """
    if set(map(type, values)) <= _TEXT_OR_NONE:  # parsed decimals: text already
        text = pl.Series(values, dtype=pl.String)
    else:
        text = pl.Series([None if v is None else str(v) for v in values], dtype=pl.String)
    if (ns := _ns_digits(text)) is not None:
        return ns
    parts = text.str.extract_groups(r"^(\d{1,16})(?:\.(\d*))?$")  # whole, fraction
    whole = parts.struct.field("1").cast(pl.Int64)
    frac = parts.struct.field("2").fill_null("").str.pad_end(4, "0")
    exact = whole * 1000 + (frac.str.slice(0, 4).cast(pl.Int64) + 5) // 10
    if not whole.null_count():  # every value plain decimal text: no float needed
        return exact
    scaled = text.cast(pl.Float64, strict=False) * 1000.0
    approx = scaled.round(0).cast(pl.Int64, strict=False)
    approx = pl.select(pl.when(scaled.abs() < 9.2e18).then(approx)).to_series()
    return pl.select(pl.when(whole.is_not_null()).then(exact).otherwise(approx)).to_series()


def _ns_digits(text: pl.Series) -> pl.Series | None:
    """Nanoseconds of times written to the nanosecond ("12.345" -> 12345), as Kineto
    writes them: the digits without the point. None unless every value is such text
    and fits Int64 (`ns_from_us` then converts value by value, to the same result)."""
    if text.null_count() or not text.str.contains(_NS_TEXT).all():
        return None
    ns = text.str.replace(".", "", literal=True).cast(pl.Int64, strict=False)
    return None if ns.null_count() else ns


def event_frame(evs: list[dict[str, Any]]) -> pl.DataFrame:
    """name, cat (lower case), pid, tid, start_ns, end_ns of checked complete events."""
    try:  # checked events hold these keys, their category as text
        ts, dur, pid, tid, cats = (list(map(itemgetter(k), evs)) for k in _CHECKED)
        lower = {c: str(c).lower() for c in set(cats)}
    except (KeyError, TypeError):
        ts, pid, tid = ([e.get(k) for e in evs] for k in ("ts", "pid", "tid"))
        dur = [e.get("dur", 0) for e in evs]
        cats = [str(e.get("cat", "")) for e in evs]
        lower = {c: c.lower() for c in set(cats)}
    names = list(map(dict.get, evs, repeat("name"), repeat("")))
    if not set(map(type, names)) <= {str}:
        names = [n if type(n) is str else str(n) for n in names]
    start = ns_from_us(ts)
    dur_ns = ns_from_us(dur).fill_null(0).clip(lower_bound=0)
    return pl.DataFrame(
        {
            "name": pl.Series(names, dtype=pl.String),
            "cat": pl.Series([lower[c] for c in cats], dtype=pl.String),
            "pid": ids(pid),
            "tid": ids(tid),
            "start_ns": start,
            "end_ns": start + dur_ns,
        }
    )


def args_of(evs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each event's "args" object ({} when absent or not an object)."""
    args: list[Any] = list(map(dict.get, evs, repeat("args")))
    if set(map(type, args)) <= {dict}:
        return args
    return [a if isinstance(a, dict) else {} for a in args]


def arg_column(args: list[dict[str, Any]], key: str) -> pl.Series:
    """One integer argument across events as Int64; anything else is null."""
    return int_series(key, list(map(dict.get, args, repeat(key))))


def axis_columns(args: list[dict[str, Any]], key: str, axes: tuple[str, ...]) -> list[pl.Series]:
    """A list-of-integers argument ("grid": [4, 106, 1]) as one Int64 column per axis
    (`key_x`, ...): null where the value is not a list of Int64 integers or is too short.

    Checked on the values' text: the repr of a JSON value is "[4, 106, 1]" only
    for a list of integers (text, floats, booleans and None print otherwise), and
    an element beyond Int64 fails the integer cast, which voids the whole value.
    """
    values = list(map(dict.get, args, repeat(key)))
    if set(map(type, values)) <= {type(None)}:
        return [pl.Series(f"{key}_{axis}", [None] * len(values), pl.Int64) for axis in axes]
    text = pl.Series(list(map(repr, values)), dtype=pl.String)
    items = text.str.strip_prefix("[").str.strip_suffix("]").str.split(", ")
    numbers = items.list.eval(pl.element().cast(pl.Int64, strict=False))
    ok = text.str.contains(_INT_LIST) & ~numbers.list.eval(pl.element().is_null()).list.any()
    return [
        pl.select(pl.when(ok).then(numbers.list.get(i, null_on_oob=True)))
        .to_series()
        .alias(f"{key}_{axis}")
        for i, axis in enumerate(axes)
    ]


def first_arg(args: list[dict[str, Any]], keys: tuple[str, ...]) -> pl.Series:
    """The first of `keys` present in each event's args, as Int64 (null otherwise)."""
    first, *rest = keys
    values = [a[first] if first in a else next((a[k] for k in rest if k in a), None) for a in args]
    return int_series(first, values)


def dims_text(value: Any) -> str | None:
    """`Input Dims` as compact text ("[[8, 128], []]"); None unless nested lists of ints."""
    return json.dumps(value) if isinstance(value, list) and _dims_ok(value, 1) else None


def dims_column(name: str, values: list[Any]) -> pl.Series:
    """`dims_text` of each value, checked on the values' text in one pass.

    The repr of a list of integers and lists is its JSON text ("[[8, 128], []]"),
    and only such a list prints with nothing but brackets, digits, minus signs
    and ", " (text is quoted, floats have a point, booleans and None are words).
    What the text alone cannot show (more than `MAX_DIMS_DEPTH` levels, an
    integer beyond Int64) is possible only with more than that many brackets or
    19 digits in a row; those few values are checked one by one.
    """
    if set(map(type, values)) <= {type(None)}:
        return pl.Series(name, [None] * len(values), pl.String)
    text = pl.Series(name, list(map(repr, values)), dtype=pl.String)
    shaped = text.str.contains(_DIMS_CHARS)
    doubtful = shaped & (
        (text.str.count_matches(r"\[", literal=False) > MAX_DIMS_DEPTH)
        | text.str.contains(r"\d{19}")
    )
    out = pl.select(pl.when(shaped & ~doubtful).then(text)).to_series().alias(name)
    rows = doubtful.arg_true()
    if rows.len():
        checked = pl.Series([dims_text(values[i]) for i in rows], dtype=pl.String)
        out = out.scatter(rows, checked)
    return out


def _dims_ok(value: list[Any], depth: int) -> bool:
    if depth > MAX_DIMS_DEPTH:
        return False
    return all(int_ok(v) or (isinstance(v, list) and _dims_ok(v, depth + 1)) for v in value)
