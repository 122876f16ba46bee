"""Reading torch.profiler traces (Kineto chrome-trace JSON) into a Profile.

`nsysmap.read.torch.torch_events` parses the file, checks and sorts its events by
category; this module builds the normalised tables from them:

    category                          table
    user_annotation                   ranges (push_pop, domain null)
    python_function "nn.Module: X_N"  ranges (synthetic module ranges,
                                      `nsysmap.read.torch.torch_modules`)
    kernel, gpu_memcpy, gpu_memset    ops: the unit of work is the GPU op
    cuda_runtime, cuda_driver         api_calls: the launches, by "correlation"
    cpu_op                            with device events: ranges (so a kernel's
                                      aten op is the operator around its launch)
                                      without: ops, the unit of work is the
                                      CPU operator, timed by its self time
    gpu_user_annotation               counted in meta, neither op nor range
    flows fwdbwd / ac2g               links (`nsysmap.read.torch.torch_links`)

Old traces' categories (Operator, Runtime, Kernel, Memcpy, Memset) read the
same. This module never imports torch: it only reads the file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap.core.errors import NoGpuData
from nsysmap.core.launch_keys import LAUNCH_API
from nsysmap.core.profile import Profile
from nsysmap.core.range_names import PREFIX as NSYSMAP
from nsysmap.intervals.nesting import nest_intervals
from nsysmap.read.torch.mangled import MANGLED, short_mangled
from nsysmap.read.torch.torch_arrow import arrow_families
from nsysmap.read.torch.torch_events import (
    Skipped,
    decompressed,
    parse_events,
    paused_gc,
    split_events,
)
from nsysmap.read.torch.torch_families import DIMS, Families, from_buckets
from nsysmap.read.torch.torch_links import (
    autograd_ranges,
    launching_operators,
    link_operators,
    with_flow_correlation,
)
from nsysmap.read.torch.torch_meta import devices_frame, trace_meta
from nsysmap.read.torch.torch_modules import module_ranges

_GPU_KIND = {"kernel": "kernel", "memcpy": "memcpy", "memset": "memset"}
_NULL = pl.lit(None, pl.Int64)
_BASE = ["name", "pid", "tid", "start_ns", "end_ns", "kind"]
Flows = Callable[[], pl.DataFrame]  # the launch flows' table, made when first asked for


def read_trace(path: str | Path, *, memory_gb: float | None = None) -> Profile:
    """Read a torch.profiler chrome trace (.json, or gzipped) into a Profile.

    Raises InputNotFound for a missing file, NotAProfile for anything that is
    not a chrome trace, NoGpuData for a trace without a single operator,
    InputTooLarge for one larger than the memory budget (`memory_gb`, None:
    the default of nsysmap.core.memory) reads, once inflated.
    Events with unreadable fields are skipped and counted in `meta`; an event
    with a negative `dur` makes the trace NotAProfile (it ends before it starts).
    """
    path = Path(path)
    with paused_gc():  # millions of acyclic objects: collections would find nothing
        raw = decompressed(path, memory_gb)
        fast = arrow_families(raw)  # None unless every event reads the usual way
        if fast is not None:
            header, families = fast
        else:
            header, events = parse_events(path, raw)
            del raw
            buckets, thread_events, skipped = split_events(events)
            del events
            skipped.check_durations(path)
            families = from_buckets(buckets, thread_events, skipped)
        return _profile_of(path, header, families)


def _profile_of(path: Path, header: dict[str, Any], fam: Families) -> Profile:
    """The Profile from the checked events' tables."""
    cpu, links = link_operators(fam.cpu, fam.fwdbwd)
    annotations = _base(fam.ranges, "push_pop")
    modules, module_facts = _modules(fam.modules, annotations)
    if fam.gpu.height:
        api = _launch_frame(fam.api, fam.launch_flows)
        units = _device_ops(fam.gpu, api, cpu, fam.launch_flows)
        unit, operators = "gpu_op", autograd_ranges(cpu)
    elif cpu.height:
        (units, api), unit = _cpu_units(cpu), "cpu_op"
        operators = autograd_ranges(cpu.filter(pl.col("seq").is_not_null()))
    else:
        raise NoGpuData(_nothing_message(path, fam.skipped))
    facts = {
        "unit_of_work": unit,
        "cuda_launch_calls": _launch_calls(fam.api),
        **module_facts,
        **links,
        "gpu_user_annotations": fam.gpu_annotations,
        "compute_dtype": fam.compute_dtype,
        **_skipped_facts(fam.skipped),
    }
    return Profile(
        ops=units,
        api_calls=api,
        ranges=_ranges([annotations, modules, _base(operators, "push_pop")]),
        threads=fam.threads,
        devices=devices_frame(header.get("deviceProperties")),
        meta=trace_meta(header, path, facts),
    ).checked()


def _nothing_message(path: Path, skipped: Skipped) -> str:
    why = skipped.describe()
    return f"{path}: the trace holds no operator or GPU events" + (f" ({why})" if why else "")


def _skipped_facts(skipped: Skipped) -> dict[str, Any]:
    return {
        "events_skipped": skipped.total,
        "gpu_events_skipped": skipped.gpu,
        "events_skipped_detail": skipped.describe(),
        "events_args_ignored": skipped.args_ignored,
    }


def _base(frame: pl.DataFrame, kind: str) -> pl.DataFrame:
    return frame.with_columns(pl.lit(kind).alias("kind")).select(_BASE)


def _modules(
    frames: pl.DataFrame, annotations: pl.DataFrame
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Module ranges from module frames, unless nsysmap's own module ranges are present."""
    own = annotations["name"].str.contains(f"^{NSYSMAP}(?:fwd|bwd):").any()
    ranges, clipped = module_ranges(frames.clear() if own else frames)
    source = "nsysmap ranges" if own else ("nn.Module frames" if ranges.height else None)
    facts = {
        "module_frames": frames.height,
        "module_source": source,
        "module_frames_clipped": clipped,
    }
    return _base(ranges, "synthetic"), facts


def _launch_frame(frame: pl.DataFrame, flows: Flows) -> pl.DataFrame:
    """CUDA runtime and driver calls that carry a correlation id (from args, else a flow)."""
    frame = with_flow_correlation(frame, flows, "s")
    launches = frame.filter(pl.col("correlation").is_not_null())
    return _launch_columns(launches, pl.col("correlation"), pl.col("name"))


def _launch_columns(frame: pl.DataFrame, correlation: pl.Expr, api: pl.Expr) -> pl.DataFrame:
    """The launching calls' columns (as the API_CALLS rows are built from them): the
    calling thread, the correlation id, the call's name and its time."""
    return frame.select(
        "pid",
        "tid",
        correlation.alias("correlation_id"),
        api.alias("api_name"),
        "start_ns",
        "end_ns",
    )


def _device_ops(
    frame: pl.DataFrame, api: pl.DataFrame, cpu: pl.DataFrame, flows: Flows
) -> pl.DataFrame:
    """PROFILE_OPS rows: pid from the launch (device events carry the device as pid),
    input shapes from the CPU operator the event is linked to by "External id"."""
    launch_pid = api.group_by("correlation_id").agg(pl.col("pid").first().alias("launch_pid"))
    gpu = with_flow_correlation(frame, flows, "f").rename({"correlation": "correlation_id"})
    operator = launching_operators(gpu, api, cpu)
    ops = (
        gpu.join(launch_pid, on="correlation_id", how="left", maintain_order="left")
        .with_columns(input_shapes=cpu["input_shapes"].gather(operator))
        .sort("start_ns", "end_ns", "device", "stream", "correlation_id", maintain_order=True)
        .with_row_index("op_id")
        .join(_short_names(gpu["name"]), on="name", how="left", maintain_order="left")
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
        "short_name",
        *(f"grid_{d}" for d in DIMS),
        *(f"block_{d}" for d in DIMS),
        "bytes",
        "input_shapes",
    )


def _host_pid(api: pl.DataFrame, cpu: pl.DataFrame) -> int | None:
    """The process that launched most work: the pid of GPU ops without a launch."""
    pids = pl.concat([api["pid"], cpu["pid"]]).drop_nulls()
    return None if pids.is_empty() else int(pids.mode().sort()[0])


def _short_names(names: pl.Series) -> pl.DataFrame:
    """name -> short_name for each distinct name (a trace repeats a few hundred names);
    a mangled C++ symbol's from its own names (nsysmap.read.torch.mangled)."""
    distinct = names.unique().to_frame("name")
    short = distinct.with_columns(short_kernel_name(pl.col("name")).alias("short_name"))
    mangled = short["name"].str.contains(MANGLED).fill_null(False)
    if not mangled.any():
        return short
    rows = mangled.arg_true()
    read = [short_mangled(name) for name in short["name"].gather(rows)]
    shorter = pl.Series(read, dtype=pl.String).fill_null(short["short_name"].gather(rows))
    return short.with_columns(short["short_name"].scatter(rows, shorter))


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


def _launch_calls(api: pl.DataFrame) -> int:
    """How many of the runtime and driver calls launch GPU work (LAUNCH_API): a trace
    without GPU events that has them is of a GPU run whose GPU activity was not recorded."""
    if api.is_empty() or "name" not in api.columns:
        return 0
    return int(api["name"].str.contains(LAUNCH_API).sum())


def _cpu_units(cpu: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """PROFILE_OPS and API_CALLS for a CPU-only trace: each operator is a unit of
    work, timed by its self time, that "launches" itself on its own thread."""
    ops = (
        cpu.sort("pid", "tid", "start_ns", "end_ns", descending=[False, False, False, True])
        .with_row_index("op_id")
        .with_columns(pl.col("op_id").cast(pl.Int64))
    )
    ops = ops.join(self_times(ops), on="op_id", how="left", maintain_order="left")
    units = ops.select(
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
        *(_NULL.alias(f"grid_{d}") for d in DIMS),
        *(_NULL.alias(f"block_{d}") for d in DIMS),
        _NULL.alias("bytes"),
        "input_shapes",
    )
    api = _launch_columns(ops, pl.col("op_id"), pl.lit("cpu_op"))
    return units, api


def self_times(ops: pl.DataFrame) -> pl.DataFrame:
    """op_id -> dur_ns: each operator's duration less its direct children's.

    `ops` has op_id, pid, tid, start_ns, end_ns; operators on one thread nest
    (`nsysmap.intervals.nesting`). Children are clipped to their parent, so events that
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


def _ranges(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """RANGES rows; depth and parent are left to `nsysmap.attribution.normalise`."""
    base = pl.concat(parts)
    ordered = base.sort("start_ns", "end_ns", descending=[False, True], maintain_order=True)
    return ordered.with_row_index("range_id").select(
        pl.col("range_id").cast(pl.Int64),
        "pid",
        "tid",
        pl.lit(None, pl.String).alias("domain"),
        "name",
        "start_ns",
        "end_ns",
        "kind",
        pl.lit(None, pl.Int32).alias("depth"),
        _NULL.alias("parent_id"),
    )
