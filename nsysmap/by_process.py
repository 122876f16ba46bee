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
range_id go on counting from one process to the next. `split_processes`
decides whether to split (the export's expected peak memory against what
is free), `process_blocks` yields the OPS blocks of each process in turn,
and `ByProcess` collects what the rest of the flow needs from each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from nsysmap.attribution.attribute import attribute_blocks
from nsysmap.attribution.normalise import normalise
from nsysmap.attribution.rules import NameRules
from nsysmap.output.by_range import by_range, combine_leaves, merge_by_range
from nsysmap.output.conservation import added_totals, input_totals
from nsysmap.profile import NestedProfile
from nsysmap.read import nsys_specs as specs
from nsysmap.read.nsys_probe import open_export
from nsysmap.read.nsys_sql import last_rowid
from nsysmap.read.nsys_sqlite import GPU_WORK_SPECS, gpu_processes, read_sqlite
from nsysmap.scalars import opt_int
from nsysmap.stages import Stages

# Peak resident memory of a whole-export run per row of its GPU activity,
# CUDA API and NVTX tables: 15.4 GB for 49.5 million rows (10^7 kernels,
# 2.9·10^7 ranges, 10^7 API calls) in the benchmark (docs/performance.md).
BYTES_PER_ROW = 310
# Split when the expected peak is above this share of the memory available.
AVAILABLE_SHARE = 0.8
_ROW_SPECS = (*GPU_WORK_SPECS, specs.RUNTIME, specs.NVTX)


def split_processes(path: Path, memory_gb: float | None) -> list[int] | None:
    """The processes to attribute one at a time, or None to read `path` whole.

    Only for nsys `.sqlite` exports with work on two processes or more, whose
    expected peak (`expected_bytes`) is above `memory_gb` (None: 80 % of the
    memory available now; none known: never split).
    """
    if not path.name.lower().endswith(".sqlite"):
        return None
    budget = memory_gb * 1e9 if memory_gb is not None else _available_bytes()
    if budget is None or expected_bytes(path) <= budget:
        return None
    processes = gpu_processes(path)
    return processes if processes is not None and len(processes) > 1 else None


def expected_bytes(path: Path) -> int:
    """About the peak memory of reading `path` whole: BYTES_PER_ROW per row
    (by the tables' largest rowids: no scan)."""
    export = open_export(path)
    return BYTES_PER_ROW * sum(last_rowid(export, spec.table) or 0 for spec in _ROW_SPECS)


def _available_bytes() -> float | None:
    """AVAILABLE_SHARE of the memory available now (Linux), else None."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(":")
        if name == "MemAvailable" and value.split()[0].isdigit():
            return AVAILABLE_SHARE * int(value.split()[0]) * 1024
    return None


@dataclass
class ByProcess:
    """What the flow keeps from each process once its blocks are out."""

    by_range: list[pl.DataFrame] = field(default_factory=list)
    totals: list[pl.DataFrame] = field(default_factory=list)  # input_totals per process
    profiles: list[NestedProfile] = field(default_factory=list)  # without ranges or ops

    def merged_by_range(self) -> pl.DataFrame:
        return merge_by_range(self.by_range)

    def input_totals(self) -> pl.DataFrame:
        return added_totals(self.totals)

    def profile(self) -> NestedProfile:
        """The processes' meta (counts added up, the capture's extent), threads and
        devices, with no operations, ranges or API calls (those are in ops.parquet)."""
        return replace(
            self.profiles[0],
            threads=pl.concat([p.threads for p in self.profiles]).unique(maintain_order=True),
            meta=merged_meta([p.meta for p in self.profiles], len(self.profiles)),
        )


def process_blocks(
    path: Path,
    processes: list[int],
    leaves_of: Callable[[int], list[pl.DataFrame]],
    kept: ByProcess,
    *,
    block_rows: int,
    rules: NameRules,
    stages: Stages,
) -> Iterator[pl.DataFrame]:
    """The OPS blocks of each process of `path` in turn, `block_rows` rows at a time.

    The caller summarises each block before asking for the next;
    `leaves_of(k)` gives the range leaves (`partial_summaries`) of the
    blocks it has been handed from the k-th on, from which each process's
    by_range is taken once its last block is out. Only one process's
    profile is held at a time.
    """
    first_ids = (0, 0)
    handed = 0
    for pid in processes:
        with stages.stage("read", f"reading process {pid}"):
            raw = read_sqlite(path, process=pid, first_ids=first_ids)
        with stages.stage("normalise", "nesting ranges"):
            profile = normalise(raw)
        del raw
        first_ids = _next_ids(profile, first_ids)
        start = handed
        for block in attribute_blocks(profile, block_rows=block_rows, rules=rules):
            handed += 1
            yield block
        with stages.stage("summarise", "summarising"):
            leaves = combine_leaves(leaves_of(start))
            kept.by_range.append(by_range(leaves, profile.ranges))
        kept.totals.append(input_totals(profile.ops))
        kept.profiles.append(profile.released(ops=False))
        del profile


def _next_ids(profile: NestedProfile, first_ids: tuple[int, int]) -> tuple[int, int]:
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


def merged_meta(metas: list[pl.DataFrame], n_processes: int) -> pl.DataFrame:
    """One meta frame from those of the processes, plus `processes_read_apart`."""
    values: dict[str, list[str | None]] = {}
    for meta in metas:
        for key, value in zip(meta["key"], meta["value"], strict=True):
            values.setdefault(key, []).append(value)
    out: dict[str, str | None] = {}
    for key, found in values.items():
        numbers = [int(v) for v in found if v is not None and v.lstrip("-").isdigit()]
        if key in _WIDEST and numbers:
            out[key] = str(_WIDEST[key](numbers))
        elif key in _ADDED and numbers:
            out[key] = str(sum(numbers))
        else:
            out[key] = next((v for v in found if v is not None), None)
    out["processes_read_apart"] = str(n_processes)
    return pl.DataFrame(
        {"key": list(out), "value": list(out.values())},
        schema={"key": pl.String, "value": pl.String},
    )
