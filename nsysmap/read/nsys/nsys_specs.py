"""The nsys export format as the reader knows it: what is read, and how values are encoded.

A `TableSpec` lists the logical columns wanted from one table and, for
each, the physical column names it has had over nsys versions
(`device_id=id|deviceId`). `nsysmap.read.nsys.nsys_sql` builds the SELECT from these
constants and the columns a file turns out to have, never from data.

`process_id`, `thread_id`, `text_or_null` and `string_value` decode nsys's
serialized ids, the '' that a text read by `nsys_sql` holds when unset, and
references into StringIds (`strings_table`): Polars expressions, used by every
stage that builds frames.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

ID_MASK = 0xFFFFFF  # a serialized id's process (above 24 bits) and thread (below)
Raw = dict[str, pl.DataFrame | None]  # the tables read: table name -> rows (None: absent)


@dataclass(frozen=True)
class TableSpec:
    """The columns read from one table.

    `ints` and `texts` hold `alias=candidate|candidate` items: the first
    candidate the table has is read under the alias.
    """

    table: str
    ints: str
    texts: str = ""
    where: str = ""
    # The column holding each row's serialized process (globalPid or globalTid),
    # for reading one process's rows; "" for tables of the whole capture.
    process: str = ""

    def empty_if_none(self, frame: pl.DataFrame | None) -> pl.DataFrame:
        """`frame`, or (for an absent table) an empty frame of the columns read."""
        if frame is not None:
            return frame
        return pl.DataFrame(schema={a: pl.String if t else pl.Int64 for a, t, _ in self.columns()})

    def columns(self) -> list[tuple[str, bool, tuple[str, ...]]]:
        """(alias, is_text, candidates) for every logical column."""
        out = []
        for items, is_text in ((self.ints, False), (self.texts, True)):
            for item in items.split():
                alias, _, names = item.partition("=")
                out.append((alias, is_text, tuple((names or alias).split("|"))))
        return out


KERNEL = TableSpec(
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "start end deviceId streamId correlationId globalPid demangledName shortName mangledName"
    " gridX gridY gridZ blockX blockY blockZ graphNodeId graphId",
    process="globalPid",
)
# The kernels without their launch geometry (grid and block): a third of the
# kernel table's read, and nothing the flow writes holds it.
LAUNCH_GEOMETRY = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
KERNEL_NO_GEOMETRY = replace(
    KERNEL, ints=" ".join(c for c in KERNEL.ints.split() if c not in LAUNCH_GEOMETRY)
)
MEMCPY = TableSpec(
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "start end deviceId streamId correlationId globalPid bytes copyKind graphNodeId graphId",
    process="globalPid",
)
MEMSET = TableSpec(
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "start end deviceId streamId correlationId globalPid bytes graphNodeId graphId",
    process="globalPid",
)
# One row per replay of a CUDA graph traced as a whole (--cuda-graph-trace=graph).
GRAPH_TRACE = TableSpec(
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    "start end deviceId streamId correlationId globalPid graphId graphExecId",
    process="globalPid",
)
# Graph node creations and clones (--cuda-graph-trace=node). Older exports
# keep the same rows in CUDA_GRAPH_EVENTS (with graphNodeId); newer ones use
# CUDA_GRAPH_EVENTS for whole graphs (graphId, originalGraphId, graphExecId).
GRAPH_NODE_EVENTS = TableSpec(
    "CUDA_GRAPH_NODE_EVENTS", "start globalTid graphNodeId originalGraphNodeId", process="globalTid"
)
GRAPH_EVENTS = TableSpec(
    "CUDA_GRAPH_EVENTS",
    "start globalTid graphId originalGraphId graphNodeId originalGraphNodeId",
    process="globalTid",
)
RUNTIME = TableSpec(
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "start end eventClass globalTid correlationId nameId",
    process="globalTid",
)
# Only ranges (59 push/pop, 60 start/end) and domain creations (75).
NVTX = TableSpec(
    "NVTX_EVENTS",
    "start end eventType globalTid textId domainId",
    "text",
    " WHERE eventType IN (59, 60, 75)",
    process="globalTid",
)
STRINGS = TableSpec("StringIds", "id", "value")
THREAD_NAMES = TableSpec("ThreadNames", "nameId globalTid", process="globalTid")
GPU_INFO = TableSpec(
    "TARGET_INFO_GPU",
    "device_id=id|deviceId sm_count=smCount memory=totalMemory"
    " major=computeMajor minor=computeMinor",
    "name",
)
# The oldest exports describe GPUs here instead (column names from NVIDIA's
# published schema notes of that era; no such file is in the test corpus).
CUDA_GPU_INFO = TableSpec(
    "TARGET_INFO_CUDA_GPU",
    "device_id=deviceId|id sm_count=numMultiprocessors|smCount"
    " memory=totalGlobalMem|globalMemorySize|totalMemory"
    " major=computeCapabilityMajor|computeMajor minor=computeCapabilityMinor|computeMinor",
    "name",
)
MEMCPY_KINDS = TableSpec("ENUM_CUDA_MEMCPY_OPER", "id", "name")
_META_KEYS = " WHERE name IN ('EXPORT_PRODUCT_VERSION', 'EXPORT_SCHEMA_VERSION')"
META_TABLES = [
    TableSpec("META_DATA_EXPORT", "", "name value", _META_KEYS),
    TableSpec("EXPORT_META_DATA", "", "name value", _META_KEYS),
]
# The launched process's environment (`NAME="value"` rows), for its rank.
LAUNCH_ENV = TableSpec(
    "META_DATA_CAPTURE", "", "name value", " WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE'"
)


def process_id(column: str) -> pl.Expr:
    """The process of a serialized globalTid / globalPid: (id >> 24) & 0xFFFFFF."""
    return (pl.col(column) // (1 << 24)) & ID_MASK


def thread_id(column: str) -> pl.Expr:
    """The thread of a serialized globalTid: id & 0xFFFFFF."""
    return pl.col(column) & ID_MASK


def text_or_null(text: str | pl.Expr) -> pl.Expr:
    """A text as read (unset reads as '') with '' made null again."""
    text = pl.col(text) if isinstance(text, str) else text
    return pl.when(text != "").then(text)


def strings_table(frame: pl.DataFrame | None) -> pl.DataFrame:
    """StringIds as read, each id once (its first value)."""
    return STRINGS.empty_if_none(frame).unique("id", keep="first", maintain_order=True)


def string_value(column: str, strings: pl.DataFrame) -> pl.Expr:
    """The StringIds value the id in `column` points to (null when none)."""
    ids, n = strings["id"], strings.height
    if n and ids[0] == 0 and ids[n - 1] == n - 1 and ids.is_sorted():  # ids 0..n-1: index
        index = pl.col(column)
        found = pl.lit(strings["value"]).gather(index.clip(0, n - 1))
        return pl.when(index.is_between(0, n - 1)).then(found)
    return pl.col(column).replace_strict(
        ids, strings["value"], default=None, return_dtype=pl.String
    )
