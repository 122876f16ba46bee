"""GPU operations of an nsys export: kernels, memcpys, memsets and CUDA graph replays.

Part of the nsys reader's frames stage (`nsysmap.read.nsys.nsys_frames` calls
`gpu_ops_frame`, and gives `kernels_batch` to the queries for each batch of
the kernel table as it arrives): Polars only, no SQL, every StringIds lookup
an expression.
"""

from __future__ import annotations

import polars as pl

from nsysmap.core import schemas
from nsysmap.read.nsys import nsys_specs as specs
from nsysmap.read.nsys.nsys_specs import Raw

# Copy kinds for exports without ENUM_CUDA_MEMCPY_OPER (that enum's ids).
COPY_KINDS: tuple[str, ...]
COPY_KINDS = ("Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH")
COPY_KINDS += ("PtoP", "Unified HtoD", "Unified DtoH", "Unified DtoD")


def gpu_ops_frame(raw: Raw, strings: pl.DataFrame, first_id: int = 0) -> pl.DataFrame:
    """Kernels, memcpys, memsets, then graph replays, each in file order; op_id counts
    them from `first_id`.

    Two columns beyond PROFILE_OPS, `graph_node_id` and `graph_id`, say which ops
    ran in or as a CUDA graph (see `nsysmap.read.nsys.nsys_graphs`).
    """
    kernels = raw.pop(specs.KERNEL.table)
    frames = [
        kernels_batch(specs.KERNEL.empty_if_none(None), strings) if kernels is None else kernels,
        _memcpys(
            specs.MEMCPY.empty_if_none(raw.pop(specs.MEMCPY.table)), raw[specs.MEMCPY_KINDS.table]
        ),
        _memsets(specs.MEMSET.empty_if_none(raw.pop(specs.MEMSET.table))),
        _graph_replays(specs.GRAPH_TRACE.empty_if_none(raw.pop(specs.GRAPH_TRACE.table))),
    ]
    ops = pl.concat(frames, how="diagonal_relaxed")
    op_id = pl.int_range(first_id, first_id + pl.len(), dtype=pl.Int64)
    return ops.with_columns(op_id=op_id, input_shapes=None)


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
        "pid": specs.process_id("globalPid"),
        "correlation_id": pl.col("correlationId"),
        "start_ns": pl.col("start"),
        "end_ns": pl.col("end"),
        "dur_ns": pl.col("end") - pl.col("start"),
    }


def kernels_batch(kernels: pl.DataFrame, strings: pl.DataFrame) -> pl.DataFrame:
    """Name: the demangled name, else the short one, else the mangled one."""
    demangled, short, mangled = (
        specs.text_or_null(specs.string_value(c, strings))
        for c in ("demangledName", "shortName", "mangledName")
    )
    grid = {f"grid_{a}": _geometry(kernels, f"grid{a.upper()}") for a in "xyz"}
    block = {f"block_{a}": _geometry(kernels, f"block{a.upper()}") for a in "xyz"}
    return kernels.select(
        **_op_columns("kernel"),
        name=pl.coalesce(demangled, short, mangled, pl.lit("[unknown kernel]")),
        short_name=short,
        **grid,
        **block,
    )


def _geometry(kernels: pl.DataFrame, column: str) -> pl.Expr:
    """A launch geometry column of the kernels, null where it was not read."""
    return pl.col(column) if column in kernels.columns else pl.lit(None, pl.Int64)


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
