"""A large nsys export attributed one process at a time, when it would not fit in memory whole.

Attribution never crosses processes: an operation's launch call, the ranges
around it and the ranges of other threads that give it a step or phase are
all its own process's. So the export can be read, nested, attributed and
summarised process by process, holding one process's profile at a time:

    export ─┬─ process 4100: read, nest, attribute ─┬─> OPS blocks ──> ops.parquet
            └─ process 4101: read, nest, attribute ─┘   partial sums ─> summaries
                                                        by_range per process ─> merged

Every summary adds up over processes (by_range's calls, sums and spans are
per range instance, and an instance is one process's), and op_id and
range_id go on counting from one process to the next. `processes_read_apart`
decides whether to split (the export's expected peak memory against what
is free), `process_profiles` yields each process's profile in turn (a
source of the one flow, nsysmap.flow), and `merged_profile` puts their
meta back together.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap.attribution.normalise import normalise
from nsysmap.input_kinds import kind_of
from nsysmap.memory import budget_bytes
from nsysmap.profile import NestedProfile
from nsysmap.read import nsys_specs as specs
from nsysmap.read.nsys_probe import open_export
from nsysmap.read.nsys_sql import row_bound, row_count
from nsysmap.read.nsys_sqlite import GPU_WORK_SPECS, gpu_processes, read_sqlite
from nsysmap.scalars import opt_int
from nsysmap.stages import Stages

# Peak resident memory of a whole-export run per row of its GPU activity,
# CUDA API and NVTX tables: 15.4 GB for 49.5 million rows (10^7 kernels,
# 2.9·10^7 ranges, 10^7 API calls) in the benchmark (docs/performance.md).
BYTES_PER_ROW = 310
_ROW_SPECS = (*GPU_WORK_SPECS, specs.RUNTIME, specs.NVTX)


def processes_read_apart(path: Path, memory_gb: float | None) -> list[int] | None:
    """The processes to read and attribute one at a time, or None to read `path` whole.

    Only for inputs whose kind can be read by process (nsysmap.input_kinds:
    nsys SQLite exports) with work on two processes or more, whose expected
    peak (`expected_bytes`) is above `memory_gb` (None: the default budget of
    nsysmap.memory; none known: never split).
    """
    if not kind_of(path).by_process:
        return None
    budget = budget_bytes(memory_gb)
    if budget is None or expected_bytes(path, budget) <= budget:
        return None
    processes = gpu_processes(path)
    return processes if processes is not None and len(processes) > 1 else None


def expected_bytes(path: Path, budget: float | None = None) -> int:
    """About the peak memory of reading `path` whole: BYTES_PER_ROW per row.

    The rows are bounded first by the tables' smallest and largest rowids (no
    scan); where that bound passes `budget` (or no budget is given), they are
    counted, since rowids need be neither dense nor positive: a table of two
    rows, at rowid -5 and 2^40, would otherwise look like 10^12 rows and be
    cut into thousands of windows.
    """
    export = open_export(path)
    bound = BYTES_PER_ROW * sum(row_bound(export, spec.table) for spec in _ROW_SPECS)
    if budget is not None and bound <= budget:
        return bound
    return BYTES_PER_ROW * sum(row_count(export, spec.table) for spec in _ROW_SPECS)


def process_profiles(
    path: Path, processes: list[int], *, stages: Stages
) -> Iterator[NestedProfile]:
    """Each process of `path` in turn, read and normalised (a source of nsysmap.flow).

    op_id and range_id go on counting from one process to the next. Only
    one process's profile is read at a time: the caller lets go of one
    before asking for the next.
    """
    reads = ((f"reading process {pid}", {"process": pid}) for pid in processes)
    return read_parts(path, reads, stages=stages)


def read_parts(
    path: Path, reads: Iterable[tuple[str, dict[str, Any]]], *, stages: Stages
) -> Iterator[NestedProfile]:
    """Each part of `path` in turn (a process, a time window: `read_sqlite`'s keywords,
    after the progress line that says which), read and normalised; op_id and
    range_id go on counting from one part to the next."""
    first_ids = (0, 0)
    for label, keywords in reads:
        with stages.stage("read", label):
            raw = read_sqlite(path, first_ids=first_ids, **keywords)
        with stages.stage("normalise", "nesting ranges"):
            profile = normalise(raw)
        del raw
        first_ids = next_ids(profile, first_ids)
        yield profile
        del profile


def merged_profile(
    profiles: list[NestedProfile], key: str = "processes_read_apart"
) -> NestedProfile:
    """The parts' meta (counts added up, the capture's extent), threads and
    devices, with what else the first part holds (the flow has released them);
    `key` in the meta says how many parts (processes, or nsysmap.by_window's windows)."""
    return replace(
        profiles[0],
        threads=pl.concat([p.threads for p in profiles]).unique(maintain_order=True),
        meta=merged_meta([p.meta for p in profiles], len(profiles), key),
    )


def next_ids(profile: NestedProfile, first_ids: tuple[int, int]) -> tuple[int, int]:
    """Where the next process's op_id and range_id start (past every id of this one,
    the synthetic FSDP ranges that nesting added included)."""
    last_op, last_range = (
        opt_int(profile.ops["op_id"].max()),
        opt_int(profile.ranges["range_id"].max()),
    )
    return (
        first_ids[0] if last_op is None else max(first_ids[0], last_op + 1),
        first_ids[1] if last_range is None else max(first_ids[1], last_range + 1),
    )


# How each meta value of the processes combines: counts add up, the capture's
# extent is the widest; any other value is the first process's (they are
# the same for every process: the export's, not the process's).
_ADDED: tuple[str, ...] = ("cuda_launch_calls", "backtrace_twin_rows", "duplicate_launch_rows")
_ADDED += ("ranges_open_at_end", "ranges_clipped_to_parent", "synthetic_fsdp_spans")
_ADDED += ("graph_replays", "graph_replay_time_ns", "graph_node_ops", "graph_node_time_ns")
_ADDED += ("graph_node_ops_with_capture",)
_WIDEST = {"capture_start_ns": min, "capture_end_ns": max}


def merged_meta(
    metas: list[pl.DataFrame], n_processes: int, key: str = "processes_read_apart"
) -> pl.DataFrame:
    """One meta frame from those of the processes, plus `key` (their number)."""
    values: dict[str, list[str | None]] = {}
    for meta in metas:
        for name, value in zip(meta["key"], meta["value"], strict=True):
            values.setdefault(name, []).append(value)
    out: dict[str, str | None] = {}
    for name, found in values.items():
        numbers = [int(v) for v in found if v is not None and v.lstrip("-").isdigit()]
        if name in _WIDEST and numbers:
            out[name] = str(_WIDEST[name](numbers))
        elif name in _ADDED and numbers:
            out[name] = str(sum(numbers))
        else:
            out[name] = next((v for v in found if v is not None), None)
    out[key] = str(n_processes)
    return pl.DataFrame(
        {"key": list(out), "value": list(out.values())},
        schema={"key": pl.String, "value": pl.String},
    )
