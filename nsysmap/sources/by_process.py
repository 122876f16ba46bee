"""A large nsys export attributed one process at a time, when it would not fit in memory whole.

Attribution never crosses processes: an operation's launch call, the ranges
around it and the ranges of other threads that give it a step or phase are
all its own process's. So the export can be read, nested, attributed and
summarised process by process, holding one process's profile at a time:

    export ─┬─ process 4100: read, nest, attribute ─┬─> OPS chunks ──> ops.parquet
            └─ process 4101: read, nest, attribute ─┘   partial sums ─> summaries
                                                        by_range per process ─> merged

Every summary adds up over processes (by_range's calls, sums and spans are
per range instance, and an instance is one process's), and op_id and
range_id go on counting from one process to the next. Whether to split is
decided in nsysmap.sources.choose (the export's expected peak memory against
what is free), `process_profiles` yields each process's profile in turn (a
source of the one flow, nsysmap.flow.run_stages), and `merged_profile` puts
their meta back together.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import polars as pl

from nsysmap.core.profile import NestedProfile
from nsysmap.core.timings import Stages
from nsysmap.read.nsys.nsys_sqlite import Export, read_sqlite
from nsysmap.sources.reading import Part, normalised_parts


def process_profiles(
    export: Export, processes: list[int], *, stages: Stages
) -> Iterator[NestedProfile]:
    """Each process of `export` in turn, read and normalised (a source of the flow).

    op_id and range_id go on counting from one process to the next. Only
    one process's profile is read at a time: the caller lets go of one
    before asking for the next.
    """

    return normalised_parts((process_part(export, pid) for pid in processes), stages)


def process_part(export: Export, pid: int) -> Part:
    """Process `pid` of `export` as a part of it, read whole (see `process_profiles`)."""
    return Part(
        f"reading process {pid}",
        lambda first_ids: read_sqlite(export, first_ids=first_ids, process=pid),
    )


PROCESSES_KEY = "processes_read_apart"


def merged_profile(
    profiles: list[NestedProfile], key: str = PROCESSES_KEY, *, processes: int | None = None
) -> NestedProfile:
    """The parts' meta (counts added up, the capture's extent), threads and
    devices, with what else the first part holds (the flow has released them);
    `key` in the meta says how many parts (processes, or nsysmap.sources.by_window's
    windows), and `processes`, where several were read each in its windows, how
    many processes."""
    meta = merged_meta([p.meta for p in profiles], len(profiles), key)
    if processes is not None:
        meta = merged_meta([meta], processes, PROCESSES_KEY)
    return replace(
        profiles[0],
        threads=pl.concat([p.threads for p in profiles]).unique(maintain_order=True),
        meta=meta,
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
    metas: list[pl.DataFrame], n_processes: int, key: str = PROCESSES_KEY
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
