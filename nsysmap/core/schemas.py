"""Declared schemas of every table nsysmap passes between stages or writes.

Column names carry their unit (`_ns` nanoseconds, `_bytes`, `_flop`); ids are
Int64 so that joins never need casts. The normalised tables are the internal
contract between the readers (nsys SQLite, torch.profiler traces) and the
attribution engine; the output tables are the public Parquet format documented
in docs/outputs.md and versioned by `OUTPUT_SCHEMA_VERSION`. Here: how tables
are declared and checked, the normalised tables, the OPS rows and the summary
tables; by family beside it, the waits' tables (wait_schemas.py), the tables
of several ranks (rank_schemas.py) and the inferred ones (inferred_schemas.py).
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

# A column's type as the declarations below write it: a dtype class (pl.Int64)
# or instance (pl.Enum(...)).
ColumnType = pl.DataType | type[pl.DataType]


def declare(columns: Mapping[str, ColumnType]) -> pl.Schema:
    """The Schema of `columns` (one signature that takes dtype classes and instances alike)."""
    return pl.Schema(columns)


OUTPUT_SCHEMA_VERSION = "1.13"

# `graph`: one replay of a CUDA graph, traced as a whole (--cuda-graph-trace=graph).
OP_KINDS = ("kernel", "memcpy", "memset", "cpu_op", "graph")
RANGE_KINDS = ("push_pop", "start_end", "synthetic")
DIRECTIONS = ("forward", "backward")
# How far attribution got for one operation (see docs/outputs.md). `other_thread`:
# the step or phase came from a range on another thread of the process (output
# schemas before 1.3 called it `window`; nsysmap.report.report_files reads those).
# `ambiguous_launch` (1.10): launch calls that differ share the op's correlation id.
ATTRIBUTION = ("range", "other_thread", "no_range", "no_launch", "ambiguous_launch")

OpKind = pl.Enum(OP_KINDS)
RangeKind = pl.Enum(RANGE_KINDS)
Direction = pl.Enum(DIRECTIONS)
Attribution = pl.Enum(ATTRIBUTION)
# Where an op's step or phase came from: its ranges' names, or what PyTorch
# records anyway (autograd's thread and nodes, optimizer work:
# nsysmap.attribution.recorded_steps).
LABEL_SOURCES = ("range", "records")
LabelSource = pl.Enum(LABEL_SOURCES)

# ---------------------------------------------------------------- normalised
# One row per GPU operation (kernel, memcpy, memset) or, for the
# torch.profiler CPU backend, per CPU operator (dur_ns is then its self time).
PROFILE_OPS = declare(
    {
        "op_id": pl.Int64,  # unique within the profile
        "kind": OpKind,
        "device_id": pl.Int64,  # -1 for CPU operators
        "stream_id": pl.Int64,
        "pid": pl.Int64,
        "correlation_id": pl.Int64,  # joins with api_calls within one pid
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "dur_ns": pl.Int64,
        "name": pl.String,  # full identity: demangled kernel name, copy kind, aten op
        "short_name": pl.String,
        "grid_x": pl.Int64,
        "grid_y": pl.Int64,
        "grid_z": pl.Int64,
        "block_x": pl.Int64,
        "block_y": pl.Int64,
        "block_z": pl.Int64,
        "bytes": pl.Int64,  # memcpy / memset size
        "input_shapes": pl.String,  # e.g. "[[8, 128, 768], [768]]" when recorded
    }
)

# CPU-side calls that launch GPU work (CUDA runtime / driver API), one row per
# call after removing backtrace twins. For the CPU backend, one row per
# operator: the operator "launches" itself on its own thread.
API_CALLS = declare(
    {
        "pid": pl.Int64,
        "tid": pl.Int64,
        "correlation_id": pl.Int64,
        "api_name": pl.String,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
    }
)

# Annotation ranges (NVTX, or torch.profiler user annotations). depth is 1 for
# a range with no enclosing range on its thread; parent_id is then null.
RANGES = declare(
    {
        "range_id": pl.Int64,
        "pid": pl.Int64,
        "tid": pl.Int64,
        "domain": pl.String,
        "name": pl.String,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "kind": RangeKind,
        "depth": pl.Int32,
        "parent_id": pl.Int64,
    }
)

# Operations that ran in or as a CUDA graph (nsys only): the graph, the node,
# and the point where the graph or node was captured (the thread and time of
# its creation, following clones back to the original), null when unknown.
GRAPH_LINKS = declare(
    {
        "op_id": pl.Int64,  # a PROFILE_OPS row
        "graph_id": pl.Int64,
        "graph_node_id": pl.Int64,  # null for a whole-graph replay
        "capture_tid": pl.Int64,  # thread of the op's pid that created the node or graph
        "capture_ns": pl.Int64,
    }
)

THREADS = declare({"pid": pl.Int64, "tid": pl.Int64, "thread_name": pl.String})

# Kernel calls of torch.compile'd graphs and the modules they came from, one row
# per call site (from the capture's compiled.json, instrument/compiled_doc.py).
COMPILED_KERNELS = declare(
    {
        "graph": pl.String,  # Inductor FX graph key, as in "## Call CompiledFxGraph <key> ##"
        "graph_direction": Direction,
        "site": pl.Int64,  # call site in the graph's code, from 0
        "kernel": pl.String,  # the call's name in a trace (cpp_fused_..., triton_..., aten::mm)
        "occurrence": pl.Int64,  # n-th call of this kernel name in the graph, from 0
        "rel_module": pl.String,  # nearest common module, below the compiled region's root
        "rel_class": pl.String,
        "rel_modules": pl.List(pl.String),  # every module the kernel's nodes came from
    }
)

DEVICES = declare(
    {
        "device_id": pl.Int64,
        "name": pl.String,
        "sm_count": pl.Int64,
        "memory_bytes": pl.Int64,
        "compute_capability": pl.String,
    }
)

META = declare({"key": pl.String, "value": pl.String})

# ------------------------------------------------------------------- outputs
OPS = declare(
    {
        "op_id": pl.Int64,
        "kind": OpKind,
        "category": pl.String,
        "device_id": pl.Int64,
        "stream_id": pl.Int64,
        "pid": pl.Int64,
        "tid": pl.Int64,  # launching thread; null without a launch call
        "correlation_id": pl.Int64,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "dur_ns": pl.Int64,
        "name": pl.String,
        "short_name": pl.String,
        "launch_api": pl.String,
        "launch_start_ns": pl.Int64,
        "attribution": Attribution,
        "range_id": pl.Int64,  # innermost range on the launching thread
        "range_name": pl.String,
        "range_path": pl.String,  # outermost to innermost, joined by " > "
        "range_depth": pl.Int32,
        # the step/phase range of another thread that gave the op its step or phase
        "other_thread_range_id": pl.Int64,
        "step": pl.Int64,
        "step_source": LabelSource,  # "range", "records", null without a step
        "phase": pl.String,
        "phase_source": LabelSource,  # "range", "records", null without a phase
        "warmup": pl.Boolean,  # launched inside a warm-up range (not null)
        "module": pl.String,  # fully qualified module path, "" for the root module
        "module_class": pl.String,
        "direction": Direction,
        "aten_op": pl.String,
        "input_shapes": pl.String,
        "graph_id": pl.Int64,  # the CUDA graph this op replays, or is a node of
        "graph_node_id": pl.Int64,
        "capture_range_path": pl.String,  # ranges open where its graph (node) was captured
        "rank": pl.Int64,  # the process's rank in a distributed job, when the profile says
        "compiled_graph": pl.String,  # Inductor graph key of a torch.compile'd graph call
        "fused_modules": pl.String,  # a compiled kernel's modules, joined by ", "
    }
)

_SUMMARY_TAIL = {"ops": pl.Int64, "time_ns": pl.Int64, "time_share": pl.Float64}
_MODULE_KEY = {"device_id": pl.Int64, "module": pl.String, "module_class": pl.String}

# How far attribution got, per device: every op counted once (nsysmap.summaries.summarise).
COVERAGE = declare({"device_id": pl.Int64, "attribution": Attribution, **_SUMMARY_TAIL})
BY_PHASE = declare({"device_id": pl.Int64, "phase": pl.String, **_SUMMARY_TAIL})
BY_CATEGORY = declare({"device_id": pl.Int64, "category": pl.String, **_SUMMARY_TAIL})
BY_STEP = declare(
    {
        "device_id": pl.Int64,
        "step": pl.Int64,
        **_SUMMARY_TAIL,
        "first_start_ns": pl.Int64,
        "last_end_ns": pl.Int64,
    }
)
BY_MODULE = declare(
    {
        **_MODULE_KEY,
        **_SUMMARY_TAIL,
        "forward_ns": pl.Int64,  # in forward calls (the ops' `direction`)
        "backward_ns": pl.Int64,  # in backward calls
        # The module and every module below it (a module that launched nothing itself
        # has a row: ops and time_ns 0).
        "inclusive_ops": pl.Int64,
        "inclusive_ns": pl.Int64,
        "inclusive_forward_ns": pl.Int64,
        "inclusive_backward_ns": pl.Int64,
    }
)
BY_MODULE_PHASE = declare(
    {
        **_MODULE_KEY,
        "phase": pl.String,
        **_SUMMARY_TAIL,
    }
)
BY_KERNEL = declare(
    {
        "device_id": pl.Int64,
        "kind": OpKind,
        "name": pl.String,
        "short_name": pl.String,
        "category": pl.String,
        **_SUMMARY_TAIL,
        "mean_ns": pl.Float64,
        "min_ns": pl.Int64,
        "max_ns": pl.Int64,
    }
)

# Communication kernels per device and step, and how much of their time
# compute on other streams of the same device covered (not a partition of
# the device's GPU time: see docs/outputs.md).
OVERLAP = declare(
    {
        "device_id": pl.Int64,
        "step": pl.Int64,
        "comm_ops": pl.Int64,
        "comm_ns": pl.Int64,
        "overlapped_ns": pl.Int64,
        "exposed_ns": pl.Int64,
        "overlapped_share": pl.Float64,
        "exposed_share": pl.Float64,
    }
)

# GPU time per range path (nsysmap.summaries.by_range); range_path null: outside every range.
BY_RANGE = declare(
    {
        "device_id": pl.Int64,
        "range_path": pl.String,  # names outermost first, joined by " > "
        "range_name": pl.String,  # the path's last name
        "domain": pl.String,  # NVTX domain of the path's last range (null: default)
        "range_depth": pl.Int32,  # names in the path
        "calls": pl.Int64,  # instances of the path with operations inside
        **_SUMMARY_TAIL,  # exclusive: operations whose innermost range has this path
        "inclusive_ops": pl.Int64,  # operations inside an instance, at any depth
        "inclusive_ns": pl.Int64,
        "inclusive_share": pl.Float64,
        "span_ns": pl.Int64,  # first GPU start to last GPU end per call, summed over calls
    }
)


class SchemaMismatch(Exception):
    """A table does not match its declared schema: a bug, not a user error."""


def conform(df: pl.DataFrame, schema: pl.Schema, table: str) -> pl.DataFrame:
    """Return `df` with exactly `schema`'s columns, in order and of its types.

    Missing columns are an error (the producer forgot one); extra columns are
    an error too, so that nothing leaves a stage undeclared.
    """
    missing = [c for c in schema.names() if c not in df.columns]
    extra = [c for c in df.columns if c not in schema]
    if missing or extra:
        raise SchemaMismatch(f"{table}: missing columns {missing}, undeclared columns {extra}")
    try:
        return df.select(pl.col(name).cast(dtype) for name, dtype in schema.items())
    except pl.exceptions.PolarsError as exc:
        raise SchemaMismatch(f"{table}: {exc}") from exc


def empty(schema: pl.Schema) -> pl.DataFrame:
    """An empty frame of the given schema."""
    return pl.DataFrame(schema=schema)
