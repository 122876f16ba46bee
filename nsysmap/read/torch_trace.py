"""Reading torch.profiler traces (Kineto chrome-trace JSON) into a Report.

`nsysmap.read.torch_events` parses the file and splits its events by category;
this module builds the normalised tables from them:

    category                          table
    user_annotation                   ranges (push_pop, domain null)
    kernel, gpu_memcpy, gpu_memset    gpu_ops: the unit of work is the GPU op
    cuda_runtime, cuda_driver         api_calls: the launches, by "correlation"
    cpu_op                            with device events: ranges (so a kernel's
                                      aten op is the operator around its launch)
                                      without: gpu_ops, the unit of work is the
                                      CPU operator, timed by its self time

This module never imports torch: it only reads the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from nsysmap import schemas
from nsysmap.attribution.nesting import nest_intervals
from nsysmap.errors import NoGpuData
from nsysmap.model import Report, meta_frame
from nsysmap.read.torch_events import (
    arg_column,
    args_of,
    event_frame,
    ids,
    load_events,
    split_events,
)

_GPU_KIND = {"kernel": "kernel", "memcpy": "memcpy", "memset": "memset"}
_HEADER_META = {
    "schemaVersion": "kineto_schema_version",
    "trace_id": "trace_id",
    "host_name": "host_name",
    "baseTimeNanoseconds": "base_time_ns",
    "cupti_version": "cupti_version",
    "cuda_runtime_version": "cuda_runtime_version",
    "cuda_driver_version": "cuda_driver_version",
    "torch_version": "torch_version",
}
_DIMS = ("x", "y", "z")
_AXES = tuple(enumerate(_DIMS))
_NULL = pl.lit(None, pl.Int64)


def read_trace(path: str | Path) -> Report:
    """Read a torch.profiler chrome trace (.json, or gzipped) into a Report.

    Raises InputNotFound for a missing file, NotAnExport for anything that is
    not a chrome trace, NoGpuData for a trace without a single operator.
    """
    path = Path(path)
    header, events = load_events(path)
    buckets, thread_events = split_events(events)
    cpu = _cpu_frame(buckets["cpu"])
    annotations = event_frame(buckets["range"])
    if buckets["gpu"]:
        api = _launch_frame(buckets["api"])
        gpu_ops, unit = _device_ops(buckets["gpu"], api, cpu), "gpu_op"
        annotations = pl.concat([annotations, _seq_ranges(cpu).select(annotations.columns)])
    elif cpu.height:
        (gpu_ops, api), unit = _cpu_units(cpu), "cpu_op"
        linked = _seq_ranges(cpu.filter(pl.col("seq").is_not_null()))
        annotations = pl.concat([annotations, linked.select(annotations.columns)])
    else:
        raise NoGpuData(f"{path}: the trace holds no operator or GPU events")
    return Report(
        gpu_ops=gpu_ops,
        api_calls=api,
        ranges=_ranges(annotations),
        threads=_threads(thread_events),
        devices=_devices(header.get("deviceProperties")),
        meta=_meta(header, path, unit),
    ).checked()


def _cpu_frame(evs: list[dict[str, Any]]) -> pl.DataFrame:
    """CPU operators with their external id and recorded input shapes."""
    args = args_of(evs)
    # str() of a nested int list is the compact "[[8, 128, 768], [768]]" form.
    dims = [None if (d := a.get("Input Dims")) is None else str(d) for a in args]
    return event_frame(evs).with_columns(
        arg_column(args, "External id", pl.Int64).alias("external_id"),
        pl.Series("input_shapes", dims, dtype=pl.String),
        arg_column(args, "Sequence number", pl.Int64).alias("seq"),
        arg_column(args, "Fwd thread id", pl.Int64).alias("fwd_tid"),
    )


def _seq_ranges(cpu: pl.DataFrame) -> pl.DataFrame:
    """Operators as ranges named in PyTorch's emit_nvtx style, for autograd linking.

    A forward operator that created an autograd node becomes `aten::addmm,
    seq = 4`; the backward node that runs for it (it records the forward
    thread in "Fwd thread id") becomes `..., stashed seq = 4`, so attribution
    can give backward work the module of its forward operator. Operators
    without a sequence number keep their plain name.
    """
    backward = pl.col("fwd_tid").fill_null(0) > 0
    seq = pl.col("seq").cast(pl.String)
    name = (
        pl.when(pl.col("seq").is_null())
        .then(pl.col("name"))
        .when(backward)
        .then(pl.format("{}, stashed seq = {}", "name", seq))
        .otherwise(pl.format("{}, seq = {}", "name", seq))
    )
    return cpu.with_columns(name.alias("name"))


def _launch_frame(evs: list[dict[str, Any]]) -> pl.DataFrame:
    """CUDA runtime and driver calls that carry a correlation id."""
    frame = event_frame(evs).with_columns(arg_column(args_of(evs), "correlation", pl.Int64))
    return frame.filter(pl.col("correlation").is_not_null()).select(
        "pid",
        "tid",
        pl.col("correlation").alias("correlation_id"),
        pl.col("name").alias("api_name"),
        "start_ns",
        "end_ns",
    )


def _device_frame(evs: list[dict[str, Any]]) -> pl.DataFrame:
    """Kernels, copies and sets with the arguments Kineto records for them."""
    args = args_of(evs)
    device = [a.get("device", a.get("inDevice")) for a in args]  # memcpy2: inDevice
    return event_frame(evs).with_columns(
        pl.Series("device", device, dtype=pl.Int64, strict=False),
        arg_column(args, "stream", pl.Int64),
        arg_column(args, "correlation", pl.Int64).alias("correlation_id"),
        arg_column(args, "External id", pl.Int64).alias("external_id"),
        arg_column(args, "bytes", pl.Int64),
        arg_column(args, "grid", pl.List(pl.Int64)),
        arg_column(args, "block", pl.List(pl.Int64)),
    )


def _device_ops(evs: list[dict[str, Any]], api: pl.DataFrame, cpu: pl.DataFrame) -> pl.DataFrame:
    """GPU_OPS rows: pid from the launch (device events carry the device as pid),
    input shapes from the CPU operator the event is linked to by "External id"."""
    launch_pid = api.group_by("correlation_id").agg(pl.col("pid").first().alias("launch_pid"))
    shapes = (
        cpu.filter(pl.col("external_id").is_not_null())
        .unique("external_id", keep="first")
        .select("external_id", "input_shapes")
    )
    ops = (
        _device_frame(evs)
        .join(launch_pid, on="correlation_id", how="left")
        .join(shapes, on="external_id", how="left")
        .sort("start_ns", "end_ns", "device", "stream", "correlation_id", maintain_order=True)
        .with_row_index("op_id")
    )
    return ops.select(
        pl.col("op_id").cast(pl.Int64),
        pl.col("cat").str.replace("^gpu_", "").replace_strict(_GPU_KIND).alias("kind"),
        pl.coalesce("device", "pid").alias("device_id"),
        pl.coalesce("stream", "tid").alias("stream_id"),
        pl.coalesce("launch_pid", pl.lit(_host_pid(api, cpu), pl.Int64)).alias("pid"),
        "correlation_id",
        "start_ns",
        "end_ns",
        (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"),
        "name",
        short_kernel_name(pl.col("name")).alias("short_name"),
        *(pl.col("grid").list.get(i, null_on_oob=True).alias(f"grid_{d}") for i, d in _AXES),
        *(pl.col("block").list.get(i, null_on_oob=True).alias(f"block_{d}") for i, d in _AXES),
        "bytes",
        "input_shapes",
    )


def _host_pid(api: pl.DataFrame, cpu: pl.DataFrame) -> int | None:
    """The process that launched most work: the pid of GPU ops without a launch."""
    pids = pl.concat([api["pid"], cpu["pid"]]).drop_nulls()
    return None if pids.is_empty() else int(pids.mode().sort()[0])


def short_kernel_name(name: pl.Expr) -> pl.Expr:
    """`void at::native::foo<float>(int)` -> `foo`; `Memcpy HtoD (A -> B)` -> `Memcpy HtoD`."""
    stem = (
        name.str.replace(r"^void\s+", "")
        .str.replace_all(r"\(anonymous namespace\)::", "")
        .str.replace(r"[<(].*$", "")
        .str.split("::")
        .list.last()
        .str.strip_chars()
    )
    return pl.when(stem.str.len_chars() > 0).then(stem).otherwise(name)


def _cpu_units(cpu: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """GPU_OPS and API_CALLS for a CPU-only trace: each operator is a unit of
    work, timed by its self time, that "launches" itself on its own thread."""
    ops = (
        cpu.sort("pid", "tid", "start_ns", "end_ns", descending=[False, False, False, True])
        .with_row_index("op_id")
        .with_columns(pl.col("op_id").cast(pl.Int64))
    )
    ops = ops.join(self_times(ops), on="op_id", how="left", maintain_order="left")
    gpu_ops = ops.select(
        "op_id",
        pl.lit("cpu_op").alias("kind"),
        pl.lit(-1, pl.Int64).alias("device_id"),
        pl.col("tid").alias("stream_id"),
        "pid",
        pl.col("op_id").alias("correlation_id"),
        "start_ns",
        "end_ns",
        "dur_ns",
        "name",
        pl.col("name").alias("short_name"),
        *(_NULL.alias(f"grid_{d}") for d in _DIMS),
        *(_NULL.alias(f"block_{d}") for d in _DIMS),
        _NULL.alias("bytes"),
        "input_shapes",
    )
    api = ops.select(
        "pid",
        "tid",
        pl.col("op_id").alias("correlation_id"),
        pl.lit("cpu_op").alias("api_name"),
        "start_ns",
        "end_ns",
    )
    return gpu_ops, api


def self_times(ops: pl.DataFrame) -> pl.DataFrame:
    """op_id -> dur_ns: each operator's duration less its direct children's.

    `ops` has op_id, pid, tid, start_ns, end_ns; operators on one thread nest
    (`nsysmap.attribution.nesting`). Children are clipped to their parent, so events that
    overlap by a rounding error never make a time negative:

        aten::linear  [0 ............ 10)   self = 10 - 7 = 3
        aten::addmm      [2 ...... 9)       self = 7
    """
    spans = ops.select("op_id", "pid", "tid", "start_ns", "end_ns")
    nested = nest_intervals(spans, by=("pid", "tid"), id_col="op_id")
    child = nested.filter(pl.col("parent_id").is_not_null()).join(
        spans.select("op_id", "start_ns", "end_ns"),
        left_on="parent_id",
        right_on="op_id",
        suffix="_parent",
    )
    overlap = pl.min_horizontal("end_ns", "end_ns_parent") - pl.max_horizontal(
        "start_ns", "start_ns_parent"
    )
    busy = child.group_by("parent_id").agg(overlap.clip(lower_bound=0).sum().alias("child_ns"))
    own = pl.col("end_ns") - pl.col("start_ns") - pl.col("child_ns").fill_null(0)
    return spans.join(busy, left_on="op_id", right_on="parent_id", how="left").select(
        "op_id", own.clip(lower_bound=0).alias("dur_ns")
    )


def _ranges(base: pl.DataFrame) -> pl.DataFrame:
    """RANGES rows, push/pop; depth and parent are left to `nsysmap.attribution.normalise`."""
    ordered = base.sort("start_ns", "end_ns", descending=[False, True], maintain_order=True)
    return ordered.with_row_index("range_id").select(
        pl.col("range_id").cast(pl.Int64),
        "pid",
        "tid",
        pl.lit(None, pl.String).alias("domain"),
        "name",
        "start_ns",
        "end_ns",
        pl.lit("push_pop").alias("kind"),
        pl.lit(None, pl.Int32).alias("depth"),
        _NULL.alias("parent_id"),
    )


def _threads(evs: list[dict[str, Any]]) -> pl.DataFrame:
    frame = pl.DataFrame(
        {
            "pid": ids([e.get("pid") for e in evs]),
            "tid": ids([e.get("tid") for e in evs]),
            "thread_name": [str(a.get("name", "")) for a in args_of(evs)],
        },
        schema=schemas.THREADS,
    )
    return frame.unique(["pid", "tid"], keep="last", maintain_order=True)


def _devices(props: Any) -> pl.DataFrame:
    """DEVICES rows from the trace's "deviceProperties" (CUDA traces only)."""
    rows = [p for p in props or [] if isinstance(p, dict) and "id" in p]
    return pl.DataFrame(
        {
            "device_id": [p.get("id") for p in rows],
            "name": [p.get("name") for p in rows],
            "sm_count": [p.get("numSms") for p in rows],
            "memory_bytes": [p.get("totalGlobalMem") for p in rows],
            "compute_capability": [
                None
                if p.get("computeMajor") is None
                else f"{p['computeMajor']}.{p.get('computeMinor', 0)}"
                for p in rows
            ],
        },
        schema=schemas.DEVICES,
        strict=False,
    )


def _meta(header: dict[str, Any], path: Path, unit: str) -> pl.DataFrame:
    items: dict[str, str | None] = {
        "backend": "torch.profiler",
        "source_path": str(path),
        "unit_of_work": unit,
    }
    for key, meta_key in _HEADER_META.items():
        if header.get(key) is not None:
            items[meta_key] = str(header[key])
    return meta_frame(items)
