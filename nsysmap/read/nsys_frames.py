"""Building the report's frames from the rows read: GPU operations and ranges.

Part of the nsys reader (`nsysmap.read.nsys_sqlite`): kernels, memcpys, memsets and
CUDA graph replays become `gpu_ops`, NVTX rows become `ranges`, with every StringIds lookup an
expression. `kernels_batch` and `nvtx_batch` run on each batch as it is read.
"""

from __future__ import annotations

import polars as pl

from nsysmap import schemas
from nsysmap.read import nsys_sql as sql

DOMAIN_CREATE = 75
PUSH_POP, START_END = 59, 60  # the NVTX event types of ranges
RANGE_KINDS = (PUSH_POP, START_END)
# Copy kinds for exports without ENUM_CUDA_MEMCPY_OPER (that enum's ids).
COPY_KINDS: tuple[str, ...]
COPY_KINDS = ("Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH")
COPY_KINDS += ("PtoP", "Unified HtoD", "Unified DtoH", "Unified DtoD")
MAX_RANGE_RUNS = 64  # range rows in more runs than this are filtered (copied)


def strings_table(frame: pl.DataFrame | None) -> pl.DataFrame:
    return sql.STRINGS.empty_if_none(frame).unique("id", keep="first", maintain_order=True)


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


def gpu_ops_frame(raw: dict[str, pl.DataFrame | None], strings: pl.DataFrame) -> pl.DataFrame:
    """Kernels, memcpys, memsets, then graph replays, each in file order; op_id counts them.

    Two columns beyond GPU_OPS, `graph_node_id` and `graph_id`, say which ops
    ran in or as a CUDA graph (see `nsysmap.read.nsys_graphs`).
    """
    kernels = raw.pop(sql.KERNEL.table)
    frames = [
        kernels_batch(sql.KERNEL.empty_if_none(None), strings) if kernels is None else kernels,
        _memcpys(sql.MEMCPY.empty_if_none(raw.pop(sql.MEMCPY.table)), raw["memcpy_kinds"]),
        _memsets(sql.MEMSET.empty_if_none(raw.pop(sql.MEMSET.table))),
        _graph_replays(sql.GRAPH_TRACE.empty_if_none(raw.pop(sql.GRAPH_TRACE.table))),
    ]
    ops = pl.concat(frames, how="diagonal_relaxed")
    return ops.with_columns(op_id=pl.int_range(pl.len(), dtype=pl.Int64), input_shapes=None)


def _op_columns(kind: str) -> dict[str, pl.Expr]:
    return {
        **_activity_columns(kind),
        "graph_node_id": pl.col("graphNodeId"),
        "graph_id": pl.col("graphId"),
    }


def _activity_columns(kind: str) -> dict[str, pl.Expr]:
    return {
        "kind": pl.lit(kind, schemas.OpKind),
        "device_id": pl.col("deviceId"),
        "stream_id": pl.col("streamId"),
        "pid": sql.process_id("globalPid"),
        "correlation_id": pl.col("correlationId"),
        "start_ns": pl.col("start"),
        "end_ns": pl.col("end"),
        "dur_ns": pl.col("end") - pl.col("start"),
    }


def kernels_batch(kernels: pl.DataFrame, strings: pl.DataFrame) -> pl.DataFrame:
    """Name: the demangled name, else the short one, else the mangled one."""
    demangled, short, mangled = (
        sql.text_or_null(string_value(c, strings))
        for c in ("demangledName", "shortName", "mangledName")
    )
    grid = {f"grid_{a}": pl.col(f"grid{a.upper()}") for a in "xyz"}
    block = {f"block_{a}": pl.col(f"block{a.upper()}") for a in "xyz"}
    return kernels.select(
        **_op_columns("kernel"),
        name=pl.coalesce(demangled, short, mangled, pl.lit("[unknown kernel]")),
        short_name=short,
        **grid,
        **block,
    )


def _memcpys(copies: pl.DataFrame, enum: pl.DataFrame | None) -> pl.DataFrame:
    """Named like "[CUDA memcpy HtoD]" after the copy kind."""
    kinds = pl.DataFrame({"copyKind": range(len(COPY_KINDS)), "_kind": COPY_KINDS})
    if enum is not None:
        kinds = pl.concat([enum.select(copyKind="id", _kind=_copy_label("name")), kinds])
    kinds = kinds.filter(pl.col("_kind").is_not_null()).unique("copyKind", keep="first")
    copies = copies.join(kinds, on="copyKind", how="left", maintain_order="left")
    label = pl.coalesce("_kind", pl.format("kind {}", "copyKind"), pl.lit("kind ?"))
    name = pl.format("[CUDA memcpy {}]", label)
    return copies.select(**_op_columns("memcpy"), name=name, short_name=name, bytes="bytes")


def _copy_label(column: str) -> pl.Expr:
    """ENUM_CUDA_MEMCPY_OPER names to labels: CUDA_MEMCPY_KIND_UVM_HTOD -> Unified HtoD."""
    kind = pl.col(column).str.strip_prefix("CUDA_MEMCPY_KIND_")
    core = kind.str.strip_prefix("UVM_")
    pair = core.str.contains(r"^[A-Z]TO[A-Z]$")
    label = (
        pl.when(pair)
        .then(core.str.replace(r"^(.)TO(.)$", "${1}to${2}"))
        .otherwise(core.str.to_titlecase())
    )
    return pl.when(kind.str.starts_with("UVM_")).then("Unified " + label).otherwise(label)


def _memsets(sets: pl.DataFrame) -> pl.DataFrame:
    name = pl.lit("[CUDA memset]")
    return sets.select(**_op_columns("memset"), name=name, short_name=name, bytes="bytes")


def _graph_replays(trace: pl.DataFrame) -> pl.DataFrame:
    """Whole-graph replays, named after the graph and its executable: "CUDA graph 3 (exec 7)"."""
    short = pl.format("CUDA graph {}", pl.col("graphId").cast(pl.String).fill_null("?"))
    exec_id = pl.col("graphExecId").cast(pl.String).fill_null("?")
    return trace.select(
        **_activity_columns("graph"),
        name=pl.format("{} (exec {})", short, exec_id),
        short_name=short,
        graph_node_id=pl.lit(None, pl.Int64),
        graph_id="graphId",
    )


def nvtx_batch(nvtx: pl.DataFrame, strings: pl.DataFrame) -> pl.DataFrame:
    """NVTX rows with process, thread and name (text, else StringIds[textId])."""
    return nvtx.select(
        "eventType",
        pid=sql.process_id("globalTid"),
        tid=sql.thread_id("globalTid"),
        domainId="domainId",
        name=pl.coalesce(sql.text_or_null("text"), string_value("textId", strings)),
        start_ns="start",
        end="end",
    )


def ranges_frame(nvtx: pl.DataFrame) -> pl.DataFrame:
    """Push/pop and start/end ranges with names and domains (from `nvtx_batch` rows).

    An open range (no end) keeps a null `end_ns`: `nsysmap.attribution.normalise`
    closes it at its container's end or its thread's last event.
    """
    domains = nvtx.filter(pl.col("eventType") == DOMAIN_CREATE).select(
        "pid", "domainId", domain="name"
    )
    domains = domains.unique(["pid", "domainId"], keep="first", maintain_order=True)
    ranges = _range_rows(nvtx).select(
        range_id=pl.int_range(pl.len(), dtype=pl.Int64),
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
        _closed=pl.col("end").is_not_null(),
    )
    return sql.rechunked(ranges)


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
