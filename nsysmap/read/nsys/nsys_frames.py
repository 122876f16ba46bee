"""Stage 3 of the nsys reader: the Profile's frames from the rows read (Polars only, no SQL).

`build(raw, strings)` turns the tables `nsysmap.read.nsys.nsys_sql` read into the
frames of a Profile: kernels, memcpys, memsets and CUDA graph replays become
`gpu_ops` (`nsysmap.read.nsys.nsys_gpu_ops`; graph links by
`nsysmap.read.nsys.nsys_graphs`), NVTX rows become
`ranges`, runtime rows `api_calls` (backtrace twins and duplicate launches
dropped), with every StringIds lookup an expression. `batch_builders` gives
the functions the queries apply to each batch of the two big tables as it
arrives, so their raw columns are never held whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from nsysmap.core import schemas
from nsysmap.core.launch_keys import LAUNCH_API, distinct_keys, first_calls, rising_ids
from nsysmap.read.nsys import nsys_specs as specs
from nsysmap.read.nsys.nsys_env import rank_facts
from nsysmap.read.nsys.nsys_gpu_ops import gpu_ops_frame, kernels_batch
from nsysmap.read.nsys.nsys_graphs import split_graphs
from nsysmap.read.nsys.nsys_specs import Raw

DOMAIN_CREATE = 75
PUSH_POP, START_END = 59, 60  # the NVTX event types of ranges
RANGE_KINDS = (PUSH_POP, START_END)
MAX_RANGE_RUNS = 64  # range rows in more runs than this are filtered (copied)
TWIN_EVENT_CLASS = 67  # the backtrace twin nsys writes next to a CUDA API row


@dataclass(frozen=True)
class Frames:
    """What the export's rows say, as frames and counts (the Profile is assembled from it)."""

    ops: pl.DataFrame
    api_calls: pl.DataFrame
    ranges: pl.DataFrame
    threads: pl.DataFrame
    devices: pl.DataFrame
    graph_links: pl.DataFrame
    export_meta: dict[str, str]  # the export's own metadata (the keys read)
    start_ns: int | None  # the first start and last end of ops, calls and ranges
    end_ns: int | None
    counts: dict[str, object]  # facts for the profile's meta: rows dropped, graphs, rank


def build(raw: Raw, strings: pl.DataFrame, first_ids: tuple[int, int] = (0, 0)) -> Frames:
    """The frames from the tables read (table name -> rows); `strings` from `strings_table`.

    Each raw table is popped from `raw` once used (a lower peak). op_id and
    range_id count from `first_ids` (operations, ranges): a process read on
    its own continues the numbering of those read before it.
    """
    for name, frame in raw.items():
        raw[name] = None if frame is None else rechunked(frame)
    gpu_ops = gpu_ops_frame(raw, strings, first_ids[0])
    gpu_ops, graph_links, graph_facts = split_graphs(
        gpu_ops, raw.pop(specs.GRAPH_NODE_EVENTS.table), raw.pop(specs.GRAPH_EVENTS.table)
    )
    api_calls, twins, duplicates = api_calls_frame(raw.pop(specs.RUNTIME.table), strings)
    nvtx = raw.pop(specs.NVTX.table)
    nvtx = nvtx_batch(specs.NVTX.empty_if_none(None), strings) if nvtx is None else nvtx
    in_ranges = nvtx.lazy().filter(pl.col("eventType").is_in(RANGE_KINDS))
    start, end = _extent(_timed(gpu_ops), api_calls, in_ranges.select("start_ns", end_ns="end"))
    ranges = ranges_frame(nvtx, first_ids[1])
    del nvtx
    metas = [raw.pop(spec.table) for spec in specs.META_TABLES]
    counts = {
        "cuda_launch_calls": api_calls["api_name"].str.contains(LAUNCH_API).sum(),
        "backtrace_twin_rows": twins,
        "duplicate_launch_rows": duplicates,
        "ranges_open_at_end": ranges["end_ns"].null_count(),
        **graph_facts,
        **rank_facts(raw.pop(specs.LAUNCH_ENV.table)),
    }
    return Frames(
        ops=gpu_ops,
        api_calls=api_calls,
        ranges=ranges,
        threads=_threads(raw[specs.THREAD_NAMES.table], strings),
        devices=_devices(raw[specs.GPU_INFO.table], raw[specs.CUDA_GPU_INFO.table]),
        graph_links=graph_links,
        export_meta=_meta(next((m for m in metas if m is not None), None)),
        start_ns=start,
        end_ns=end,
        counts=counts,
    )


def batch_builders(strings: pl.DataFrame) -> dict[str, Callable[[pl.DataFrame], pl.DataFrame]]:
    """Table name -> what each batch of it becomes as it is read (NVTX and kernels)."""
    return {
        specs.NVTX.table: lambda batch: nvtx_batch(batch, strings),
        specs.KERNEL.table: lambda batch: kernels_batch(batch, strings),
    }


def rechunked(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with its integer columns in one chunk each, rechunked one at a time.

    Texts stay in their batches (see `ranges_frame` for the one that does not).
    """
    for name, dtype in frame.schema.items():
        if dtype.is_integer():
            frame = frame.with_columns(frame[name].rechunk())
    return frame


def nvtx_batch(nvtx: pl.DataFrame, strings: pl.DataFrame) -> pl.DataFrame:
    """NVTX rows with process, thread and name (text, else StringIds[textId])."""
    return nvtx.select(
        "eventType",
        pid=specs.process_id("globalTid"),
        tid=specs.thread_id("globalTid"),
        domainId="domainId",
        name=nvtx_name(strings),
        start_ns="start",
        end="end",
    )


def nvtx_name(strings: pl.DataFrame) -> pl.Expr:
    """An NVTX row's name: its text, else StringIds[textId]."""
    return pl.coalesce(specs.text_or_null("text"), specs.string_value("textId", strings))


def ranges_frame(nvtx: pl.DataFrame, first_id: int = 0) -> pl.DataFrame:
    """Push/pop and start/end ranges with names and domains (from `nvtx_batch` rows),
    range_id counting them from `first_id`.

    An open range (no end) keeps a null `end_ns`: `nsysmap.attribution.normalise`
    closes it at its container's end or its thread's last event.
    """
    domains = nvtx.filter(pl.col("eventType") == DOMAIN_CREATE).select(
        "pid", "domainId", domain="name"
    )
    domains = domains.unique(["pid", "domainId"], keep="first", maintain_order=True)
    ranges = _range_rows(nvtx).select(
        range_id=pl.int_range(first_id, first_id + pl.len(), dtype=pl.Int64),
        pid="pid",
        tid="tid",
        domain=_domain(domains),
        name="name",
        start_ns="start_ns",
        end_ns="end",
        kind=pl.when(pl.col("eventType") == PUSH_POP)
        .then(_kind("push_pop"))
        .otherwise(_kind("start_end")),
        depth=pl.lit(None, pl.Int32),
        parent_id=pl.lit(None, pl.Int64),
    )
    # Names in one chunk too: attribution gathers them by position block by block,
    # ~8x slower across the batches' chunks. Only the 16-byte views are copied
    # (Polars strings are views into shared buffers): +30 MB at 2.9 million ranges.
    ranges = rechunked(ranges)
    return ranges.with_columns(ranges["name"].rechunk())


def _range_rows(nvtx: pl.DataFrame) -> pl.DataFrame:
    """The range rows of NVTX_EVENTS, as zero-copy slices when they come in few runs.

    A filter would copy every name; the few other events (domain creations,
    marks) usually sit between long runs of ranges.
    """
    keep = nvtx["eventType"].is_in(RANGE_KINDS)
    if keep.all():
        return nvtx
    flags = pl.DataFrame({"keep": keep}).with_row_index("i")
    runs = flags.filter(
        pl.col("keep") & (pl.col("i") == 0) | (pl.col("keep") != pl.col("keep").shift(1))
    ).filter("keep")["i"]
    if runs.len() > MAX_RANGE_RUNS:
        return nvtx.filter(keep)
    ends = flags.filter(
        pl.col("keep")
        & ((pl.col("keep") != pl.col("keep").shift(-1)) | (pl.col("i") == pl.len() - 1))
    )["i"]
    pieces = [nvtx.slice(a, b - a + 1) for a, b in zip(runs, ends, strict=True)]
    return pl.concat(pieces, rechunk=False) if pieces else nvtx.clear()


def _kind(name: str) -> pl.Expr:
    """A range kind as a RANGES enum literal."""
    return pl.lit(name, schemas.RangeKind)


def _domain(domains: pl.DataFrame) -> pl.Expr:
    """Each range's domain name: from its process's domain-create event, else null."""
    if domains.is_empty():  # the common case
        return pl.lit(None, pl.String)
    key = pl.col("pid") * (1 << 32) + pl.col("domainId")
    known = domains.select(key=pl.col("pid") * (1 << 32) + pl.col("domainId"), name="domain")
    named = key.replace_strict(known["key"], known["name"], default=None, return_dtype=pl.String)
    return pl.when(pl.col("domainId") != 0).then(named)


def api_calls_frame(
    runtime: pl.DataFrame | None, strings: pl.DataFrame
) -> tuple[pl.DataFrame, int, int]:
    """API calls without backtrace twins; also (twins dropped, duplicates dropped).

    A twin (eventClass 67) is dropped when a real row has its (pid,
    correlation id); of real rows that are copies of one (every column
    alike), the first. Real rows that share a (pid, correlation id) but differ
    are all kept: the attribution says the launches of that id are ambiguous
    (nsysmap/core/launch_keys.py). Rows without a correlation id are all kept.
    """
    calls = specs.RUNTIME.empty_if_none(runtime).with_columns(pid=specs.process_id("globalTid"))
    twin = calls["eventClass"].eq(TWIN_EVENT_CLASS).fill_null(False)
    twins, real = _split(calls, twin)
    key = ["pid", "correlationId"]
    kept, _ = _split(real, _first_copies(real))
    duplicates = real.height - kept.height
    if not twins.is_empty():  # keep a twin only when its real row is missing
        orphans = twins.join(real, on=key, how="anti")
        won = first_calls(orphans, corr="correlationId", start="start", tid="globalTid")
        kept = pl.concat([kept, orphans.filter(won)])
    twins_dropped = calls.height - kept.height - duplicates
    frame = kept.select(
        "pid",
        tid=specs.thread_id("globalTid"),
        correlation_id="correlationId",
        api_name=specs.string_value("nameId", strings),
        start_ns="start",
        end_ns="end",
    )
    return frame, twins_dropped, duplicates


def _first_copies(calls: pl.DataFrame) -> pl.Series:
    """The rows that are the first of their copies (every column alike), on the raw
    runtime columns; all of them when no (pid, correlation id) repeats (copies share one)."""
    if rising_ids(calls, "correlationId") or distinct_keys(calls, "correlationId"):
        return pl.repeat(True, calls.height, dtype=pl.Boolean, eager=True)
    first = pl.struct(pl.all()).is_first_distinct() | pl.col("correlationId").is_null()
    return calls.select(first).to_series()


def _split(frame: pl.DataFrame, mask: pl.Series) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(rows where mask holds, the others), without copying when one side is empty."""
    if mask.all():
        return frame, frame.clear()
    if not mask.any():
        return frame.clear(), frame
    return frame.filter(mask), frame.filter(~mask)


def _timed(gpu_ops: pl.DataFrame) -> pl.LazyFrame:
    """The ops with a time: CUPTI writes start = end = 0 for a graph replay it could not time."""
    untimed = (pl.col("kind") == "graph") & (pl.col("start_ns") == 0) & (pl.col("end_ns") == 0)
    return gpu_ops.lazy().filter(~untimed)


def _extent(*frames: pl.DataFrame | pl.LazyFrame) -> tuple[int | None, int | None]:
    """The first start, and the last end or start (an open range has only a start)."""
    bounds = [
        f.lazy()
        .select(
            pl.col("start_ns").min().alias("first"),
            pl.max_horizontal(pl.col("end_ns").max(), pl.col("start_ns").max()).alias("last"),
        )
        .collect()
        .row(0)
        for f in frames
    ]
    firsts = [first for first, _ in bounds]
    lasts = [last for _, last in bounds]
    firsts, lasts = [v for v in firsts if v is not None], [v for v in lasts if v is not None]
    return (min(firsts) if firsts else None, max(lasts) if lasts else None)


def _threads(names: pl.DataFrame | None, strings: pl.DataFrame) -> pl.DataFrame:
    """Thread names; a thread named twice keeps its last name."""
    threads = specs.THREAD_NAMES.empty_if_none(names).select(
        pid=specs.process_id("globalTid"),
        tid=specs.thread_id("globalTid"),
        thread_name=specs.string_value("nameId", strings),
    )
    return threads.unique(["pid", "tid"], keep="last", maintain_order=True)


def _devices(gpu: pl.DataFrame | None, cuda_gpu: pl.DataFrame | None) -> pl.DataFrame:
    """GPUs as the export lists them (not necessarily the ones used)."""
    info = specs.GPU_INFO.empty_if_none(gpu if gpu is not None else cuda_gpu)
    known = pl.col("major").fill_null(0) > 0  # other adapters are listed with zeros
    devices = info.select(
        "device_id",
        name=specs.text_or_null("name"),
        sm_count="sm_count",
        memory_bytes="memory",
        compute_capability=pl.when(known).then(pl.format("{}.{}", "major", "minor")),
    )
    return devices.unique("device_id", keep="first", maintain_order=True)


def _meta(frame: pl.DataFrame | None) -> dict[str, str]:
    """The export's own metadata (the few keys the reader reads)."""
    if frame is None:
        return {}
    rows = frame.unique("name", keep="first", maintain_order=True).rows()
    return dict(rows)
