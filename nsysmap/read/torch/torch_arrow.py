"""The usual torch.profiler trace read by Arrow's JSON reader, straight from the bytes.

`arrow_families` gives the same `Families` as parsing the trace with the standard
library and checking every event (`nsysmap.read.torch.torch_events`), without a Python
object per event, or None when the trace is not the usual kind; the caller then
reads it the general way. The events array becomes a stream of objects by dropping
the commas between events: the separator between the first two events
(`},\\n  {` in Kineto's layout) is replaced everywhere by `}\\n{`. That is safe to
trust only when Arrow then reads exactly one object more than there were
separators: a separator replaced inside an event leaves `}` and `{` with no comma
between them, which no JSON value allows, so Arrow refuses it, and a raw newline
is never inside a string. Times are read as exact decimals (`decimal128`, three
places, as Kineto writes them), so nanoseconds stay exact.

Anything the general reader would count, skip or read another way makes the
trace not usual: a field of another type than the schema's (Arrow refuses it),
an event of a family without pid, tid, name, ts or dur, a negative or huge time,
a time written with an exponent (the general reader takes it through a float),
recorded shapes of a tensor list (`Input Dims` three deep: Arrow types a field
once, as lists of lists of integers), an old trace's second spellings
(`external id`, `inDevice`), bytes that are not UTF-8 and escapes of UTF-16
surrogates (the general reader replaces what no string can hold). pid and tid
written as text (Kineto's last few events) are read from those events parsed
one by one.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from nsysmap.read.torch.torch_columns import ids
from nsysmap.read.torch.torch_events import FAMILIES, FLOW_FAMILIES, MODULE_PREFIX, Number, Skipped
from nsysmap.read.torch.torch_families import DIMS, Families
from nsysmap.read.torch.torch_meta import MATMUL_NAMES, common_dtype, threads_table

_I64 = pa.int64()
_TIME = pa.decimal128(38, 3)
_ARGS = ("External id", "Sequence number", "Fwd thread id", "correlation", "device", "stream")
_SCHEMA = pa.schema(
    [
        ("ph", pa.string()),
        ("cat", pa.string()),
        ("name", pa.string()),
        ("pid", _I64),
        ("tid", _I64),
        ("ts", _TIME),
        ("dur", _TIME),
        ("id", _I64),
        (
            "args",
            pa.struct(
                [
                    *((key, _I64) for key in (*_ARGS, "bytes")),
                    ("grid", pa.list_(_I64)),
                    ("block", pa.list_(_I64)),
                    ("Input Dims", pa.list_(pa.list_(_I64))),  # deeper ones: declined
                    ("Input type", pa.list_(pa.string())),
                    ("name", pa.string()),
                ]
            ),
        ),
    ]
)
_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEPARATOR = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
# What the fast reader leaves to the general one (see the module doc): keys it does not
# read, times written with an exponent, and escapes of UTF-16 surrogates (a lone one
# is no character: the general reader replaces it).
_UNUSUAL = (
    r'"(?:external id|inDevice)"'
    r'|"(?:ts|dur)"\s*:\s*-?[0-9]+(?:\.[0-9]+)?[eE]'
    r"|\\u[dD][89a-fA-F]"
)
_TEXT_ID = b'id": "'  # after "p or "t: a pid or tid written as text
_JOINT = b"}\n{"
_LIMIT_US = 8 * 10**15  # well inside torch_events.MAX_US, so its float checks agree
_BLOCK = 1 << 21


def arrow_families(raw: bytes) -> tuple[dict[str, Any], Families] | None:
    """The trace's header and its events' tables, or None when it is not the usual kind."""
    at = raw.find(b'"traceEvents"')
    found = _EVENTS.match(raw, at) if at >= 0 else None
    if found is None:
        return None
    start = found.end()
    sep = _SEPARATOR.search(raw, start, start + (1 << 20))
    end = _events_end(raw, start, sep.group(0)) if sep else None
    if sep is None or end is None or raw.find(b'"traceEvents"', end) >= 0:
        return None
    header = _header(raw[:start] + raw[end:])
    if header is None or _unusual(raw, start, end):
        return None
    table = _read(raw, start, end, sep.group(0), b"\n" in raw[start : sep.start()].strip())
    if table is None:
        return None
    try:
        return header, _families(table)
    except (_NotUsual, pl.exceptions.ComputeError, pl.exceptions.InvalidOperationError):
        return None  # (the errors: a decimal too large for Polars' arithmetic)


class _NotUsual(Exception):
    """The events need the general reader."""


def _events_end(raw: bytes, start: int, sep: bytes) -> int | None:
    """Where the events array closes: the `]` after the event that follows the last
    separator (a guess that Arrow's reading of the events confirms or refutes)."""
    last = raw.rfind(sep, start)
    if last < 0:
        return None
    first = last + len(sep) - 1
    text = raw[first : first + (1 << 20)].decode("utf-8", "surrogateescape")
    try:
        _, stop = json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):
        return None
    end = first + len(text[:stop].encode("utf-8", "surrogateescape"))
    while raw[end : end + 1] in (b" ", b"\n", b"\r", b"\t"):
        end += 1
    return end if raw[end : end + 1] == b"]" else None


def _header(doc: bytes) -> dict[str, Any] | None:
    """The document without its events, if it is an object whose traceEvents is []."""
    try:
        header = json.loads(doc, parse_float=Number)
    except (ValueError, RecursionError):
        return None
    if not isinstance(header, dict) or header.get("traceEvents") != []:
        return None
    return header


def _unusual(raw: bytes, start: int, end: int) -> bool:
    """Whether the events hold something the general reader reads another way: bytes
    that are not UTF-8 (Arrow's JSON reader would keep them, and no string may hold
    them) or a match of _UNUSUAL (a validating cast and one pass of a compiled regex
    over the bytes, in place)."""
    data = pa.py_buffer(raw)
    offsets = pa.py_buffer(np.array([start, end], dtype=np.int64).tobytes())
    text = pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, data])
    try:
        text = text.cast(pa.large_string())
    except pa.ArrowInvalid:
        return True
    return bool(pc.match_substring_regex(text, _UNUSUAL)[0].as_py())


def _read(raw: bytes, start: int, end: int, sep: bytes, multiline: bool) -> pa.Table | None:
    """The events by Arrow, with text pids and tids read from their events one by one."""
    n_before, n_after = raw.count(sep, 0, start), raw.count(sep, end)
    shrink = len(sep) - len(_JOINT)
    lines = raw.replace(sep, _JOINT)
    if shrink:
        n_sep = (len(raw) - len(lines)) // shrink - n_before - n_after
    else:
        n_sep = raw.count(sep, start, end)
    body_start = start - shrink * n_before
    body_end = end - shrink * (n_before + n_sep)
    texts = _text_ids(raw, start, end, sep)
    if texts:
        view = memoryview(lines)
        pieces: list[bytes | memoryview] = []
        at = body_start
        for row, pos, stop, _ in texts:
            shifted = pos - shrink * (n_before + row)
            pieces += [view[at:shifted], b"0".ljust(stop - pos)]
            at = shifted + stop - pos
        pieces.append(view[at:body_end])
        body = pa.py_buffer(b"".join(pieces))
        del pieces, view, lines  # the copy with blanked ids replaces it
    else:
        body = pa.py_buffer(lines)[body_start:body_end]
    options = pj.ParseOptions(
        explicit_schema=_SCHEMA, unexpected_field_behavior="ignore", newlines_in_values=multiline
    )
    try:
        table = pj.read_json(
            pa.BufferReader(body),
            read_options=pj.ReadOptions(use_threads=True, block_size=_BLOCK),
            parse_options=options,
        )
    except (pa.ArrowException, ValueError):
        return None
    if table.num_rows != n_sep + 1:
        return None
    return _with_text_ids(table, texts)


_TextId = tuple[int, int, int, dict[str, Any]]  # row, value start, value end, the event


def _text_ids(raw: bytes, start: int, end: int, sep: bytes) -> list[_TextId]:
    """Each pid or tid written as text: its event's row, where the value lies, the event.

    Raises nothing: an event that does not parse alone is left to Arrow, which
    refuses the text value (the caller then returns None).
    """
    hits = []
    pos = raw.find(_TEXT_ID, start, end)
    while pos >= 0:
        if raw[pos - 2 : pos] in (b'"p', b'"t'):
            hits.append(pos + len(_TEXT_ID) - 1)
        pos = raw.find(_TEXT_ID, pos + 1, end)
    found: list[_TextId] = []
    row, counted = 0, start
    for pos in hits:
        stop = raw.find(b'"', pos + 1, end) + 1
        row += raw.count(sep, counted, pos)
        counted = pos
        first = raw.rfind(sep, start, pos)
        first = start if first < 0 else first + len(sep) - 1
        last = raw.find(sep, pos, end)
        try:
            event = json.loads(raw[first : end if last < 0 else last + 1], parse_float=Number)
        except (ValueError, RecursionError):
            continue
        if stop > pos and b"\\" not in raw[pos:stop] and isinstance(event, dict):
            found.append((row, pos, stop, event))
    return found


def _with_text_ids(table: pa.Table, texts: list[_TextId]) -> pa.Table:
    """pid and tid of the events that wrote one as text, as `ids` reads them."""
    if not texts:
        return table
    rows = pl.Series([row for row, *_ in texts], dtype=pl.Int64)
    for key in ("pid", "tid"):
        column = pl.Series(key, table.column(key)).scatter(
            rows, ids([event.get(key) for *_, event in texts])
        )
        table = table.set_column(table.schema.get_field_index(key), key, column.to_arrow())
    return table


def _families(table: pa.Table) -> Families:
    """The tables of the events Arrow read (raises _NotUsual where the general reader
    would count, skip or convert something another way)."""
    events = pl.from_arrow(table)
    assert isinstance(events, pl.DataFrame)
    lower = {c: c.lower() for c in events["cat"].unique().drop_nulls()}
    cat = pl.col("cat").replace_strict(lower, default=None, return_dtype=pl.String)
    lazy = events.lazy().with_columns(cat=cat).with_columns(family=_family(), flow=_flow())
    complete = lazy.filter(pl.col("family").is_not_null())
    flows = lazy.filter(pl.col("flow").is_not_null())
    threads = lazy.filter((pl.col("ph") == "M") & (pl.col("name") == "thread_name"))
    checks = [
        _checks(complete, ("name", "pid", "tid", "ts", "dur"), ("ts", "dur")),
        _checks(flows, ("id", "pid", "tid", "ts"), ("ts",)),
        _checks(threads, ("pid", "tid"), ()),
    ]
    tables = [
        complete.filter(pl.col("family") == family).select(*_BASE, *columns)
        for family, columns in _TABLES.values()
    ]
    tables += [flows.filter(pl.col("flow") == flow).select(*_FLOW) for flow in _FLOWS]
    tables.append(threads.select("pid", "tid", _arg("name").fill_null("").alias("name")))
    matmuls = (pl.col("family") == "cpu") & pl.col("name").is_in(MATMUL_NAMES)
    tables.append(complete.filter(matmuls).select(_arg("Input type")))
    done = pl.collect_all([*checks, *tables])
    if not all(all(check.row(0)) for check in done[: len(checks)]):
        raise _NotUsual
    frames = dict(zip(_TABLES, done[len(checks) :], strict=False))
    fwdbwd, launch_flows, names, input_types = done[-4:]
    return Families(
        cpu=frames["cpu"],
        ranges=frames["ranges"],
        modules=frames["modules"],
        api=frames["api"],
        gpu=frames["gpu"],
        fwdbwd=fwdbwd,
        launch_flows=lambda: launch_flows,
        threads=threads_table(names["pid"], names["tid"], names["name"]),
        gpu_annotations=frames["gpu_annotations"].height,
        compute_dtype=common_dtype(input_types.to_series().to_list()),
        skipped=Skipped(),
    )


def _family() -> pl.Expr:
    """The family of each complete event kept (null for the others, as split_events)."""
    family = pl.col("cat").replace_strict(FAMILIES, default=None, return_dtype=pl.String)
    module = pl.col("name").str.starts_with(MODULE_PREFIX).fill_null(False)
    kept = (pl.col("ph") == "X") & ((family != "module") | module)
    return pl.when(kept).then(family)


def _flow() -> pl.Expr:
    flow = pl.col("cat").replace_strict(FLOW_FAMILIES, default=None, return_dtype=pl.String)
    return pl.when(pl.col("ph").is_in(["s", "f"])).then(flow)


def _checks(events: pl.LazyFrame, present: tuple[str, ...], times: tuple[str, ...]) -> pl.LazyFrame:
    """One row: whether every event has the fields, and whether its times are in range."""
    ok = [pl.col(c).is_not_null().all().alias(f"has {c}") for c in present]
    ok += [pl.col(t).is_between(0, _LIMIT_US, closed="left").all().alias(t) for t in times]
    return events.select(ok)


def _ns(time: str) -> pl.Expr:
    """Microseconds (three decimal places, exact) to integer nanoseconds."""
    return (pl.col(time) * 1000).cast(pl.Int64, strict=False)  # beyond: refused by _checks


def _arg(key: str) -> pl.Expr:
    return pl.col("args").struct.field(key)


def _dims_text(dims: pl.Expr) -> pl.Expr:
    """dims_column of lists of lists of integers: their JSON text ("[[8, 128], []]"),
    null where a list or an item is null (as the text of a None is no shape)."""
    inner = pl.concat_str(
        pl.lit("["), pl.element().cast(pl.List(pl.String)).list.join(", "), pl.lit("]")
    )
    text = pl.concat_str(pl.lit("["), dims.list.eval(inner).list.join(", "), pl.lit("]"))
    holes = pl.element().is_null() | pl.element().list.eval(pl.element().is_null()).list.any()
    return pl.when(~dims.list.eval(holes).list.any()).then(text)


def _axes(key: str) -> list[pl.Expr]:
    """axis_columns: null where the list is null or holds a null, else its i-th item."""
    values = _arg(key)
    ok = values.is_not_null() & ~values.list.eval(pl.element().is_null()).list.any()
    return [
        pl.when(ok).then(values.list.get(i, null_on_oob=True)).alias(f"{key}_{axis}")
        for i, axis in enumerate(DIMS)
    ]


# event_frame's columns, as from_buckets makes them
_BASE = (
    "name",
    "cat",
    "pid",
    "tid",
    _ns("ts").alias("start_ns"),
    (_ns("ts") + _ns("dur")).alias("end_ns"),
)
_FLOW = ("ph", "id", "pid", "tid", _ns("ts").alias("start_ns"))
_FLOWS = ("fwdbwd", "launch_flow")
# Families' field -> (family, the columns after event_frame's)
_TABLES: dict[str, tuple[str, tuple[pl.Expr, ...]]] = {
    "cpu": (
        "cpu",
        (
            _arg("External id").alias("external_id"),
            _dims_text(_arg("Input Dims")).alias("input_shapes"),
            _arg("Sequence number").alias("seq"),
            _arg("Fwd thread id").alias("fwd_tid"),
        ),
    ),
    "ranges": ("range", ()),
    "modules": ("module", ()),
    "api": ("api", (_arg("correlation").alias("correlation"),)),
    "gpu": (
        "gpu",
        (
            _arg("device").alias("device"),
            _arg("stream").alias("stream"),
            _arg("correlation").alias("correlation"),
            _arg("External id").alias("external_id"),
            _arg("bytes").alias("bytes"),
            *_axes("grid"),
            *_axes("block"),
        ),
    ),
    "gpu_annotations": ("gpu_annotation", ()),
}
