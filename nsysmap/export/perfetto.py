"""Attributed operations as a Chrome trace-event JSON file, for Perfetto and chrome://tracing.

One process per device; on it one track per stream (per launching thread on
the CPU backend) with a complete event ("X") per operation, named by its
kernel and carrying step, phase, module, range path and full kernel name as
arguments; above them three tracks projected from the operations
(nsysmap.export.spans): steps, phases and modules. Timestamps are
microseconds from the report's first operation, with three decimals
(nanosecond precision). Operations that overlap on one stream (which a
stream should not hold) go to a second track of that stream, so that every
track nests. Events are built and encoded as JSON by Polars, not per row,
and written CHUNK at a time: the JSON text is never whole in memory.

A trace that leaves operations of the report out says so in its first
events: a process `nsysmap: N operations left out` whose one event, over the
exported time, is named by what the trace holds and how to export the rest;
`otherData` repeats it (`left_out`, `note`).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

import polars as pl

from instrument.phase_vocabulary import TRACE_COLOURS
from nsysmap._version import __version__
from nsysmap.core.scalars import to_int
from nsysmap.export.spans import module_spans, nest, phase_spans, step_spans

# Chrome's reserved colour names (`cname`), per kernel category and per phase.
CATEGORY_CNAME = {
    "gemm": "thread_state_running",
    "attention": "rail_response",
    "softmax": "rail_animation",
    "normalization": "rail_idle",
    "elementwise": "rail_load",
    "reduction": "startup",
    "optimizer": "good",
    "memcpy": "thread_state_iowait",
    "memset": "thread_state_uninterruptible",
    "communication": "terrible",
    "other": "generic_work",
}
PHASE_CNAME = TRACE_COLOURS  # instrument/phase_vocabulary.py
TRACKS = {"steps": 1, "phases": 2, "modules": 3}  # tids of the projected tracks
FIRST_OP_TID = 10
NOTE_PID = -1000  # the process of the note on what was left out, sorted first
CHUNK = 50_000  # events encoded and written at a time
KEYS = ("op_id", "device_id", "stream_id", "tid", "start_ns", "end_ns")
SPAN_INPUT = ("op_id", "device_id", "start_ns", "end_ns", "step", "phase", "module", "module_class")


@dataclass(frozen=True)
class Selection:
    """What to export: some steps, and a window in ms from the report's first operation.

    `label` describes a selection made for the user (the default window).
    """

    steps: tuple[int, ...] | None = None
    window_ms: tuple[float, float] | None = None
    label: str | None = None

    def apply(self, ops: pl.DataFrame, origin_ns: int) -> pl.DataFrame:
        """The operations selected (a window keeps the operations that overlap it, and the
        instantaneous ones on its edges)."""
        if self.steps is not None:
            ops = ops.filter(pl.col("step").is_in(list(self.steps)))
        if self.window_ms is not None:
            first, last = (origin_ns + round(x * 1e6) for x in self.window_ms)
            start, end = pl.col("start_ns"), pl.col("end_ns")
            overlaps = (start < last) & (end > first)
            ops = ops.filter(overlaps | ((start >= first) & (end <= last)))
        return ops

    def describe(self) -> str:
        """The selection in words, for the note on what a trace leaves out."""
        if self.label is not None:
            return self.label
        parts = []
        if self.steps is not None:
            parts.append("steps " + ", ".join(str(s) for s in self.steps))
        if self.window_ms is not None:
            parts.append("the window {:g}-{:g} ms".format(*self.window_ms))
        return " within ".join(parts) or "every operation"


def op_tracks(ops: pl.DataFrame) -> pl.DataFrame:
    """`ops` with `lane` (0, or n for the n-th overlapping layer of its stream) and `track` name."""
    key = pl.coalesce("stream_id", "tid", pl.lit(-1))
    label = (
        pl.when(pl.col("stream_id").is_not_null())
        .then(pl.format("stream {}", "stream_id"))
        .when(pl.col("tid").is_not_null())
        .then(pl.format("thread {}", "tid"))
        .otherwise(pl.lit("operations"))
    )
    rows = ops.with_columns(_key=key, _label=label, lane=pl.lit(0))
    pending, done = rows, [rows.clear().with_columns(_overlaps=pl.lit(False))]
    while not pending.is_empty():
        ordered = pending.sort("device_id", "_key", "start_ns", "op_id")
        reach = pl.col("end_ns").cum_max().shift(1).over("device_id", "_key")
        ordered = ordered.with_columns(_overlaps=pl.col("start_ns") < reach.fill_null(-(2**62)))
        done.append(ordered.filter(~pl.col("_overlaps")))
        pending = ordered.filter(pl.col("_overlaps")).with_columns(pl.col("lane") + 1)
    out = pl.concat(done).drop("_overlaps")
    named = pl.when(pl.col("lane") == 0).then("_label")
    return out.with_columns(track=named.otherwise(pl.format("{} (overlap {})", "_label", "lane")))


def _encode(frame: pl.DataFrame) -> list[str]:
    """Each row as one JSON object."""
    return frame.select(pl.struct(pl.all()).struct.json_encode()).to_series().to_list()


def _us(column: str, origin_ns: int) -> pl.Expr:
    return ((pl.col(column) - origin_ns) / 1000).round(3)


def op_events(rows: pl.DataFrame, origin_ns: int) -> list[str]:
    """X events of operations that carry their track's `tid_`, in the order given."""
    cname = pl.col("category").replace_strict(CATEGORY_CNAME, default="generic_work")
    events = rows.select(
        name=pl.coalesce("short_name", "name", pl.lit("?")),
        cat=pl.col("category").fill_null("other"),
        ph=pl.lit("X"),
        ts=_us("start_ns", origin_ns),
        dur=(pl.col("dur_ns") / 1000).round(3),
        pid=pl.col("device_id"),
        tid=pl.col("tid_"),
        cname=cname,
        args=pl.struct(
            "op_id",
            "step",
            "phase",
            "module",
            "module_class",
            "range_path",
            kernel=pl.col("name"),
            kind=pl.col("kind").cast(pl.String),
            attribution=pl.col("attribution").cast(pl.String),
        ),
    )
    return _encode(events)


def span_events(spans: pl.DataFrame, origin_ns: int) -> list[str]:
    """X events of the projected steps, phases and modules, in the order given."""
    cname = pl.col("phase").replace_strict(PHASE_CNAME, default="generic_work")
    events = spans.select(
        name=pl.col("name"),
        cat=pl.col("track"),
        ph=pl.lit("X"),
        ts=_us("start_ns", origin_ns),
        dur=((pl.col("end_ns") - pl.col("start_ns")) / 1000).round(3),
        pid=pl.col("device_id"),
        tid=pl.col("track").replace_strict(TRACKS, return_dtype=pl.Int64),
        cname=cname,
        args=pl.struct("step", "phase", "module", "module_class", "ops"),
    )
    return _encode(events)


def metadata(devices: dict[int, str | None], tids: pl.DataFrame) -> list[dict[str, Any]]:
    """M events naming processes (devices) and tracks, in a fixed order."""
    events: list[dict[str, Any]] = []
    for device, name in sorted(devices.items()):
        label = "CPU operators" if device < 0 else f"GPU {device}" + (f": {name}" if name else "")
        events.append(_meta(device, 0, "process_name", {"name": label}))
        events.append(_meta(device, 0, "process_sort_index", {"sort_index": device + 1}))
        for track, tid in TRACKS.items():
            events.append(_meta(device, tid, "thread_name", {"name": track}))
            events.append(_meta(device, tid, "thread_sort_index", {"sort_index": tid}))
    for row in tids.sort("device_id", "tid_").iter_rows(named=True):
        events.append(_meta(row["device_id"], row["tid_"], "thread_name", {"name": row["track"]}))
        events.append(
            _meta(row["device_id"], row["tid_"], "thread_sort_index", {"sort_index": row["tid_"]})
        )
    return events


def _meta(pid: int, tid: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


def note_events(note: str, left_out: int, span_ns: tuple[int, int], origin_ns: int) -> list[dict]:
    """The process and event that say what a trace leaves out, to be written first."""
    start, end = span_ns
    return [
        _meta(NOTE_PID, 0, "process_name", {"name": f"nsysmap: {left_out:,} operations left out"}),
        _meta(NOTE_PID, 0, "process_sort_index", {"sort_index": NOTE_PID}),
        _meta(NOTE_PID, 1, "thread_name", {"name": "note"}),
        _meta(NOTE_PID, 1, "thread_sort_index", {"sort_index": 1}),
        {
            "name": note,
            "cat": "note",
            "ph": "X",
            "ts": round((start - origin_ns) / 1000, 3),
            "dur": round((end - start) / 1000, 3),
            "pid": NOTE_PID,
            "tid": 1,
            "args": {"left_out": left_out, "note": note},
        },
    ]


@dataclass(frozen=True)
class Trace:
    """A trace ready to be written: its events are encoded only as `write` goes."""

    other: dict[str, Any]  # otherData
    first: list[dict[str, Any]]  # the note, if any, and the M events
    spans: pl.DataFrame  # nested and in order
    rows: pl.DataFrame  # the operations selected
    order: pl.DataFrame  # `_row` of `rows` and its `tid_`, in the order to write
    origin_ns: int

    @property
    def operations(self) -> int:
        return self.rows.height

    @property
    def note(self) -> str | None:
        """What the trace leaves out of the report, in one line (None: nothing)."""
        return self.other.get("note")

    def write(self, out: TextIO) -> None:
        """Write the JSON to `out`, CHUNK events at a time."""
        out.write('{"displayTimeUnit": "ms", "otherData": ' + json.dumps(self.other))
        out.write(', "traceEvents": [\n')
        separator = ""
        for chunk in self._chunks():
            if chunk:
                out.write(separator + ",\n".join(chunk))
                separator = ",\n"
        out.write("\n]}\n")

    def _chunks(self) -> Iterator[list[str]]:
        yield [json.dumps(event) for event in self.first]
        for at in range(0, self.spans.height, CHUNK):
            yield span_events(self.spans.slice(at, CHUNK), self.origin_ns)
        for at in range(0, self.order.height, CHUNK):
            part = self.order.slice(at, CHUNK)
            rows = self.rows.select(pl.all().gather(part["_row"])).with_columns(part["tid_"])
            yield op_events(rows, self.origin_ns)


def build_trace(
    ops: pl.DataFrame, devices: dict[int, str | None], selection: Selection, source: str = ""
) -> Trace:
    """The trace of the operations `selection` keeps; tracks and spans are computed on the
    few columns they need, the operations' events only when written."""
    origin = to_int(ops["start_ns"].min() or 0)
    chosen = selection.apply(ops, origin)
    keys = chosen.select(KEYS).with_row_index("_row")
    lanes = op_tracks(keys)
    tids = (
        lanes.select("device_id", "track", "_key", "lane")
        .unique()
        .sort("device_id", "_key", "lane")
        .with_columns(tid_=(pl.int_range(pl.len()) + FIRST_OP_TID).over("device_id"))
        .select("device_id", "track", "tid_")
    )
    order = (
        lanes.join(tids, on=["device_id", "track"])
        .sort("device_id", "tid_", "start_ns", "op_id")
        .select("_row", "tid_")
    )
    narrow = chosen.select(SPAN_INPUT)
    spans = nest(pl.concat([step_spans(narrow), phase_spans(narrow), module_spans(narrow)]))
    left_out = ops.height - chosen.height
    other: dict[str, Any] = {
        "nsysmap_version": __version__,
        "source": source,
        "origin_ns": origin,
        "steps": list(selection.steps) if selection.steps is not None else None,
        "window_ms": list(selection.window_ms) if selection.window_ms else None,
        "operations": chosen.height,
        "left_out": left_out,
    }
    first: list[dict[str, Any]] = []
    if left_out and chosen.height:
        other["note"] = (
            f"this trace holds {chosen.height:,} of the report's {ops.height:,} operations"
            f" ({selection.describe()}); {left_out:,} are left out: export them with --all,"
            " or choose others with --steps or --window"
        )
        extent = (to_int(chosen["start_ns"].min()), to_int(chosen["end_ns"].max()))
        first = note_events(other["note"], left_out, extent, origin)
    named = {d: devices.get(d) for d in chosen["device_id"].unique().to_list()}
    first += metadata(named, tids)
    return Trace(other, first, spans, chosen, order, origin)


def trace_text(
    ops: pl.DataFrame, devices: dict[int, str | None], selection: Selection, source: str = ""
) -> tuple[str, int]:
    """The trace as JSON text, and the number of operations in it (for small reports)."""
    trace = build_trace(ops, devices, selection, source)
    out = io.StringIO()
    trace.write(out)
    return out.getvalue(), trace.operations
