"""Synthetic Nsight Systems SQLite exports, for tests, samples and benchmarks.

Two layers:

* `write_export(path, tables)` (from `devtools.synth.bulk`) writes frames into
  tables shaped like those of current real exports, fast enough for tens of
  millions of rows; `bulk_tables(n)` generates a large training-like export.
* `SynthExport`, a small builder with whole-millisecond timings for tests that
  are checked by hand::

      b = SynthExport()
      b.thread(1, 1, "python")
      b.range(1, 1, 0, 10, "step 0")                      # NVTX push/pop, 0..10 ms
      b.launch(1, 1, 2, 3, corr=7)                        # cudaLaunchKernel_v7000
      b.kernel(1, 0, 7, 4, 6, corr=7, name="void gemm()")  # pid 1, device 0, stream 7
      b.write(tmp_path / "run.sqlite")

Ids are encoded like nsys: `globalTid = 1<<48 | pid<<24 | tid`,
`globalPid = 1<<48 | pid<<24`; strings live in `StringIds`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from pathlib import Path

import polars as pl

from devtools.synth.bulk import (
    NS_PER_MS,
    Frame,
    global_pid,
    global_tid,
    known_columns,
    write_export,
)

# Columns the builder fills, per table (the rest take their defaults).
_BUILT = {
    "StringIds": "id value",
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start end deviceId contextId streamId correlationId globalPid demangledName"
        " shortName mangledName gridX gridY gridZ blockX blockY blockZ graphNodeId graphId"
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": "start end eventClass globalTid correlationId nameId",
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start end deviceId contextId streamId correlationId globalPid bytes copyKind graphNodeId"
    ),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        "start end deviceId contextId streamId correlationId globalPid value bytes graphNodeId"
    ),
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": (
        "start end deviceId contextId streamId correlationId globalPid graphId graphExecId"
    ),
    "CUDA_GRAPH_EVENTS": (
        "start end eventClass globalTid nameId graphId originalGraphId graphExecId"
    ),
    "CUDA_GRAPH_NODE_EVENTS": (
        "start end eventClass globalTid nameId graphNodeId originalGraphNodeId"
    ),
    "NVTX_EVENTS": "start end eventType rangeId text globalTid endGlobalTid textId domainId",
    "ThreadNames": "nameId priority globalTid",
    "TARGET_INFO_GPU": "vmId id name totalMemory smCount computeMajor computeMinor",
    "META_DATA_EXPORT": "name value",
    "META_DATA_CAPTURE": "name value",
    "ENUM_NSYS_EVENT_TYPE": "id name label",
    "ENUM_CUDA_MEMCPY_OPER": "id name label",
}
_EVENT_TYPES = [(34, "NvtxMark"), (39, "NvtxThread"), (59, "NvtxPushPopRange")]
_EVENT_TYPES += [(60, "NvtxStartEndRange"), (75, "NvtxDomainCreate")]
_COPY_KINDS = "UNKNOWN HTOD DTOH HTOA ATOH ATOA ATOD DTOA DTOD HTOH PTOP UVM_HTOD UVM_DTOH UVM_DTOD"
_PARTS = {"H": "Host", "D": "Device", "A": "Array", "P": "Peer"}
_VERSIONED = re.compile(r"_v\d+\Z")
Text = str | bytes  # bytes are stored as TEXT unchanged (invalid UTF-8, Latin-1)


def _copy_label(kind: str) -> str:
    """The enum's human label: "UVM_HTOD" -> "Unified Host-to-Device"."""
    if kind == "UNKNOWN":
        return "Unknown"
    unified, _, pair = kind.rpartition("_")
    label = f"{_PARTS[pair[0]]}-to-{_PARTS[pair[-1]]}"
    return f"Unified {label}" if unified else label


def _ns(ms: float | None) -> int | None:
    return None if ms is None else round(ms * NS_PER_MS)


class SynthExport:
    """Collects rows with millisecond times and writes them as an nsys export.

    Tables appear only when rows were added to them, except StringIds,
    ThreadNames, the metadata and enum tables, which are always written.
    """

    def __init__(
        self, *, nsys_version: str = "2026.2.1.210", schema_version: str = "3.25.0"
    ) -> None:
        self._rows: dict[str, list[tuple]] = {t: [] for t in _BUILT}
        self._strings: dict[Text, int] = {}
        self._domains: dict[tuple[int, Text], int] = {}
        self._extra: list[tuple[str, str, object]] = []
        self._tables: dict[str, Frame] = {}
        self._range_id = 0
        for key, value in [
            ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
            ("EXPORT_PRODUCT_VERSION", nsys_version),
            ("EXPORT_SCHEMA_VERSION", schema_version),
        ]:
            self.meta(key, value)
        self._rows["ENUM_NSYS_EVENT_TYPE"] = [(i, n, n) for i, n in _EVENT_TYPES]
        self._rows["ENUM_CUDA_MEMCPY_OPER"] = [
            (i, f"CUDA_MEMCPY_KIND_{k}", _copy_label(k)) for i, k in enumerate(_COPY_KINDS.split())
        ]

    def string_id(self, value: Text) -> int:
        """The StringIds id of `value`, adding it when new."""
        if value not in self._strings:
            self._strings[value] = len(self._strings)
            self._rows["StringIds"].append((self._strings[value], value))
        return self._strings[value]

    def thread(self, pid: int, tid: int, name: Text) -> None:
        """Name a thread (ThreadNames)."""
        self._rows["ThreadNames"].append((self.string_id(name), 0, global_tid(pid, tid)))

    def gpu(
        self,
        device: int,
        name: str = "NVIDIA H100 80GB HBM3",
        *,
        sm_count: int = 132,
        memory_bytes: int = 80 * 2**30,
        compute: tuple[int, int] = (9, 0),
    ) -> None:
        """Describe a GPU (TARGET_INFO_GPU)."""
        row = (global_pid(0), device, name, memory_bytes, sm_count, *compute)
        self._rows["TARGET_INFO_GPU"].append(row)

    def domain(self, pid: int, name: Text, *, create_event: bool = True) -> int:
        """Register an NVTX domain of process `pid`; its id (1, 2, ... per process).

        With create_event=False the domain-create event is left out, as when
        it happened before a capture window.
        """
        key = (pid, name)
        if key not in self._domains:
            self._domains[key] = 1 + sum(p == pid for p, _ in self._domains)
            if create_event:
                row = (0, None, 75, None, name, global_tid(pid, pid), None, None)
                self._rows["NVTX_EVENTS"].append((*row, self._domains[key]))
        return self._domains[key]

    def range(
        self,
        pid: int,
        tid: int,
        start_ms: float,
        end_ms: float | None,
        name: Text,
        *,
        domain: Text | None = None,
        style: str = "text",
        event_type: int = 59,
        end_tid: int | None = None,
    ) -> None:
        """An NVTX range: push/pop (event_type 59) or start/end (60).

        style "text" stores the name inline, "textId" as a registered string.
        end_ms None leaves the range open at capture end; end_tid (start/end
        ranges only) is the thread that ended it, by default the starting one.
        """
        domain_id = 0 if domain is None else self.domain(pid, domain)
        text, text_id = (name, None) if style == "text" else (None, self.string_id(name))
        range_id, end_gtid = None, None
        if event_type == 60:
            self._range_id += 1
            range_id, end_gtid = (
                self._range_id,
                global_tid(pid, tid if end_tid is None else end_tid),
            )
        row = (_ns(start_ms), _ns(end_ms), event_type, range_id, text, global_tid(pid, tid))
        self._rows["NVTX_EVENTS"].append((*row, end_gtid, text_id, domain_id))

    def mark(self, pid: int, tid: int, at_ms: float, text: Text, *, event_type: int = 34) -> None:
        """An NVTX instant event (mark 34, thread name 39, ...): not a range."""
        row = (_ns(at_ms), None, event_type, None, text, global_tid(pid, tid), None, None, 0)
        self._rows["NVTX_EVENTS"].append(row)

    def launch(
        self,
        pid: int,
        tid: int,
        start_ms: float,
        end_ms: float,
        corr: int,
        *,
        api: str = "cudaLaunchKernel_v7000",
        event_class: int = 0,
        twin: bool = False,
    ) -> None:
        """A CUDA API call (runtime: event_class 0, driver: 1).

        twin=True adds the backtrace twin nsys writes when backtraces are on:
        eventClass 67, the unversioned name, the same correlation id.
        """
        gtid = global_tid(pid, tid)
        row = (_ns(start_ms), _ns(end_ms), event_class, gtid, corr, self.string_id(api))
        self._rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append(row)
        if twin:
            name = self.string_id(_VERSIONED.sub("", api))
            self._rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append((*row[:2], 67, gtid, corr, name))

    def kernel(
        self,
        pid: int,
        device: int,
        stream: int,
        start_ms: float,
        end_ms: float,
        corr: int | None,
        *,
        name: Text = "kernel",
        short_name: Text | None = None,
        grid: tuple[int, int, int] = (1, 1, 1),
        block: tuple[int, int, int] = (128, 1, 1),
        graph_node: int | None = None,
        graph: int | None = None,
    ) -> None:
        """A kernel execution; `name` is its demangled name.

        A kernel replayed as a node of a CUDA graph (`--cuda-graph-trace=node`)
        carries `graph_node` (and, from nsys 2025.5, `graph`); its `corr` is
        that of the cudaGraphLaunch call.
        """
        ids = self.string_id(name), self.string_id(name if short_name is None else short_name)
        row = (*self._gpu_row(pid, device, stream, start_ms, end_ms, corr), *ids, None)
        graph_ids = (graph_node, graph)
        self._rows["CUPTI_ACTIVITY_KIND_KERNEL"].append((*row, *grid, *block, *graph_ids))

    def memcpy(
        self,
        pid: int,
        device: int,
        stream: int,
        start_ms: float,
        end_ms: float,
        corr: int | None,
        *,
        nbytes: int = 1024,
        copy_kind: int = 1,
        graph_node: int | None = None,
    ) -> None:
        """A memory copy; copy_kind as in ENUM_CUDA_MEMCPY_OPER (1 = HtoD)."""
        row = (*self._gpu_row(pid, device, stream, start_ms, end_ms, corr), nbytes, copy_kind)
        self._rows["CUPTI_ACTIVITY_KIND_MEMCPY"].append((*row, graph_node))

    def memset(
        self,
        pid: int,
        device: int,
        stream: int,
        start_ms: float,
        end_ms: float,
        corr: int | None,
        *,
        nbytes: int = 1024,
        graph_node: int | None = None,
    ) -> None:
        """A memset of `nbytes` bytes to 0."""
        row = (*self._gpu_row(pid, device, stream, start_ms, end_ms, corr), 0, nbytes)
        self._rows["CUPTI_ACTIVITY_KIND_MEMSET"].append((*row, graph_node))

    def graph_replay(
        self,
        pid: int,
        device: int,
        stream: int,
        start_ms: float,
        end_ms: float,
        corr: int | None,
        *,
        graph: int,
        exec_id: int,
    ) -> None:
        """One replay of a CUDA graph traced as a whole (`--cuda-graph-trace=graph`).

        Launched by a cudaGraphLaunch call with the same `corr` (see `launch`).
        """
        row = (*self._gpu_row(pid, device, stream, start_ms, end_ms, corr), graph, exec_id)
        self._rows["CUPTI_ACTIVITY_KIND_GRAPH_TRACE"].append(row)

    def graph_event(
        self,
        pid: int,
        tid: int,
        at_ms: float,
        graph: int,
        *,
        original: int | None = None,
        exec_id: int | None = None,
        what: str = "Graph Creation",
    ) -> None:
        """A CUDA_GRAPH_EVENTS row: a graph created, cloned from `original`, or instantiated."""
        row = self._graph_row(pid, tid, at_ms, what, graph)
        self._rows["CUDA_GRAPH_EVENTS"].append((*row, original, exec_id))

    def graph_node_event(
        self,
        pid: int,
        tid: int,
        at_ms: float,
        node: int,
        *,
        original: int | None = None,
        what: str = "Graph Node Creation",
    ) -> None:
        """A CUDA_GRAPH_NODE_EVENTS row: node created (during capture, on the capturing
        thread) or, with `original`, cloned from that node when its graph is instantiated."""
        row = self._graph_row(pid, tid, at_ms, what, node)
        self._rows["CUDA_GRAPH_NODE_EVENTS"].append((*row, original))

    def _graph_row(self, pid: int, tid: int, at_ms: float, what: str, key: int) -> tuple:
        """The leading columns of a graph or graph-node event: an instant on a thread."""
        return (_ns(at_ms), _ns(at_ms), 0, global_tid(pid, tid), self.string_id(what), key)

    def _gpu_row(
        self, pid: int, device: int, stream: int, start_ms: float, end_ms: float, corr: int | None
    ) -> tuple:
        return (_ns(start_ms), _ns(end_ms), device, 1, stream, corr, global_pid(pid))

    def meta(self, name: str, value: Text, *, table: str = "META_DATA_EXPORT") -> None:
        """A metadata row (META_DATA_EXPORT, META_DATA_CAPTURE or EXPORT_META_DATA)."""
        self._rows.setdefault(table, []).append((name, value))

    def column(self, table: str, name: str, value: object) -> None:
        """Add a foreign column holding `value` to `table`, as other tools do."""
        self._extra.append((table, name, value))

    def table(self, name: str, frame: Frame) -> None:
        """Add a table as given (a foreign table, or an empty one with None)."""
        self._tables[name] = frame

    def tables(self) -> dict[str, Frame]:
        """The export as frames, ready for `write_export`."""
        out: dict[str, pl.DataFrame] = {}
        for table, rows in self._rows.items():
            if rows or table in _ALWAYS:
                out[table] = _frame(table, rows)
        for table, name, value in self._extra:
            if table in out:
                out[table] = out[table].with_columns(pl.lit(value).alias(name))
        return {**out, **self._tables}

    def write(
        self,
        path: str | os.PathLike[str],
        *,
        omit: Collection[str] = (),
        exact_columns: Collection[str] = (),
    ) -> Path:
        """Write the export to `path`, leaving out the tables named in `omit`."""
        tables = {k: v for k, v in self.tables().items() if k not in omit}
        return write_export(path, tables, exact_columns=exact_columns)


_ALWAYS = {"StringIds", "ThreadNames", "META_DATA_EXPORT", "META_DATA_CAPTURE"}
_ALWAYS |= {"ENUM_NSYS_EVENT_TYPE", "ENUM_CUDA_MEMCPY_OPER"}
_POLARS_TYPES = {"INTEGER": pl.Int64, "TEXT": pl.String, "REAL": pl.Float64}


def _frame(table: str, rows: list[tuple]) -> pl.DataFrame:
    """Rows to a frame typed like the table's columns; bytes make a column Binary."""
    names = _BUILT.get(table, "name value").split()
    types = {c.name: _POLARS_TYPES[c.sql_type] for c in known_columns(table)}
    data: dict[str, pl.Series] = {}
    for i, name in enumerate(names):
        values = [row[i] for row in rows]
        if any(isinstance(v, bytes) for v in values):
            values = [v.encode() if isinstance(v, str) else v for v in values]
            data[name] = pl.Series(name, values, dtype=pl.Binary)
        else:
            data[name] = pl.Series(name, values, dtype=types.get(name, pl.String))
    return pl.DataFrame(data)
