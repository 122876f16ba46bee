"""What a torch.profiler trace says about itself: devices, threads, rank, dtype, metadata.

Header fields are read only when they have the expected type; anything else
is left out, never guessed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap.core import schemas
from nsysmap.core.profile import meta_frame
from nsysmap.read.torch.torch_columns import args_of, ids
from nsysmap.read.torch.torch_events import int_ok

_HEADER_META = {
    "schemaVersion": "kineto_schema_version",
    "trace_id": "trace_id",
    "host_name": "host_name",
    "baseTimeNanoseconds": "base_time_ns",
    "cupti_version": "cupti_version",
    "cuda_runtime_version": "cuda_runtime_version",
    "cuda_driver_version": "cuda_driver_version",
    "torch_version": "torch_version",
    "with_modules": "with_modules",  # 1 when recorded with with_modules=True
    "with_stack": "with_stack",
}
# distributedInfo keys -> meta keys (rank: this trace's process in the job).
_DISTRIBUTED_META = {"rank": "rank", "world_size": "world_size", "backend": "distributed_backend"}
# "Input type" of matmul operators -> the compute dtype nsysmap's peak table knows.
_DTYPES = {"c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32"}
MATMUL_NAMES = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear")


def threads_frame(evs: list[dict[str, Any]]) -> pl.DataFrame:
    """THREADS rows from thread_name metadata events (a thread named twice keeps its last)."""
    names = [a.get("name") for a in args_of(evs)]
    return threads_table(
        ids([e.get("pid") for e in evs]),
        ids([e.get("tid") for e in evs]),
        pl.Series([n if isinstance(n, str) else "" for n in names], dtype=pl.String),
    )


def threads_table(pid: pl.Series, tid: pl.Series, names: pl.Series) -> pl.DataFrame:
    """THREADS rows from the thread_name events' pid, tid and name ("" when it has none)."""
    frame = pl.DataFrame({"pid": pid, "tid": tid, "thread_name": names}, schema=schemas.THREADS)
    return frame.unique(["pid", "tid"], keep="last", maintain_order=True)


def devices_frame(props: Any) -> pl.DataFrame:
    """DEVICES rows from the trace's "deviceProperties" (CUDA traces only)."""
    rows = (
        [p for p in props if isinstance(p, dict) and int_ok(p.get("id"))]
        if isinstance(props, list)
        else []
    )

    def number(p: dict[str, Any], key: str) -> int | None:
        return p[key] if int_ok(p.get(key)) else None

    def capability(p: dict[str, Any]) -> str | None:
        major, minor = number(p, "computeMajor"), number(p, "computeMinor")
        return None if major is None else f"{major}.{minor or 0}"

    return pl.DataFrame(
        {
            "device_id": [p["id"] for p in rows],
            "name": [p["name"] if isinstance(p.get("name"), str) else None for p in rows],
            "sm_count": [number(p, "numSms") for p in rows],
            "memory_bytes": [number(p, "totalGlobalMem") for p in rows],
            "compute_capability": [capability(p) for p in rows],
        },
        schema=schemas.DEVICES,
    )


def compute_dtype(cpu_evs: list[dict[str, Any]]) -> str | None:
    """The dtype most matmul operators ran in ("bf16", "fp16", "fp32"), from "Input type"."""
    return common_dtype(
        args.get("Input type")
        for ev in cpu_evs
        if ev.get("name") in MATMUL_NAMES and isinstance(args := ev.get("args"), dict)
    )


def common_dtype(input_types: Iterable[Any]) -> str | None:
    """The dtype most matmul operators ran in, from their "Input type" values in order
    (each a list of type names, or anything else, which says nothing): each operator
    counts its first type nsysmap knows; of equal counts, the first seen wins."""
    seen: Counter[str] = Counter()
    for types in input_types:
        if isinstance(types, list):
            found = [_DTYPES[t] for t in types if isinstance(t, str) and t in _DTYPES]
            seen.update(found[:1])
    return seen.most_common(1)[0][0] if seen else None


def trace_meta(header: dict[str, Any], path: Path, facts: dict[str, Any]) -> pl.DataFrame:
    """META rows: backend, source, header fields, distributed rank, and the reader's facts."""
    items: dict[str, str | None] = {"backend": "torch.profiler", "source_path": str(path)}
    for key, meta_key in _HEADER_META.items():
        value = header.get(key)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            items[meta_key] = str(value)
    dist = header.get("distributedInfo")
    if isinstance(dist, dict):
        for key, meta_key in _DISTRIBUTED_META.items():
            value = dist.get(key)
            if int_ok(value) or (key == "backend" and isinstance(value, str)):
                items[meta_key] = str(value)
    items.update({k: None if v is None else str(v) for k, v in facts.items()})
    return meta_frame(items)
