"""The checked events of a trace as one table per family, whichever reader made them.

`nsysmap.read.torch.torch_trace` builds the Profile from a `Families`; two readers make
one: `from_buckets` from the Python events `nsysmap.read.torch.torch_events` parsed and
checked (every trace), and `nsysmap.read.torch.torch_arrow` straight from the bytes
(the usual trace, faster). Both give the same tables, row for row, in the
events' file order:

    table       columns (event_frame's: name, cat, pid, tid, start_ns, end_ns, and)
    cpu         external_id, input_shapes, seq, fwd_tid
    ranges      -                      (user annotations)
    modules     -                      (module frames, python_function "nn.Module: ...")
    api         correlation            (CUDA runtime and driver calls)
    gpu         device, stream, correlation, external_id, bytes, grid_x.., block_x..
    fwdbwd      flow_frame's: ph, id, pid, tid, start_ns
    launch_flows  the same for ac2g flows, made only when asked for
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial
from itertools import repeat
from typing import Any

import polars as pl

from nsysmap.read.torch.torch_columns import (
    arg_column,
    args_of,
    axis_columns,
    dims_column,
    event_frame,
    first_arg,
)
from nsysmap.read.torch.torch_events import Buckets, Skipped
from nsysmap.read.torch.torch_links import flow_frame
from nsysmap.read.torch.torch_meta import compute_dtype, threads_frame

EXTERNAL_ID = ("External id", "external id")  # the second spelling: old traces' GPU events
DEVICE = ("device", "inDevice")  # memcpy2: inDevice
DIMS = ("x", "y", "z")


@dataclass(frozen=True)
class Families:
    """One table per family of checked events, and what the reader counted."""

    cpu: pl.DataFrame
    ranges: pl.DataFrame
    modules: pl.DataFrame
    api: pl.DataFrame
    gpu: pl.DataFrame
    fwdbwd: pl.DataFrame
    launch_flows: Callable[[], pl.DataFrame]
    threads: pl.DataFrame
    gpu_annotations: int
    compute_dtype: str | None
    skipped: Skipped


def from_buckets(
    buckets: Buckets, thread_events: list[dict[str, Any]], skipped: Skipped
) -> Families:
    """The tables of the events `split_events` checked and sorted."""
    return Families(
        cpu=cpu_frame(buckets["cpu"]),
        ranges=event_frame(buckets["range"]),
        modules=event_frame(buckets["module"]),
        api=event_frame(buckets["api"]).with_columns(
            arg_column(args_of(buckets["api"]), "correlation")
        ),
        gpu=device_frame(buckets["gpu"]),
        fwdbwd=flow_frame(buckets["fwdbwd"]),
        launch_flows=cache(partial(flow_frame, buckets["launch_flow"])),
        threads=threads_frame(thread_events),
        gpu_annotations=len(buckets["gpu_annotation"]),
        compute_dtype=compute_dtype(buckets["cpu"]),
        skipped=skipped,
    )


def cpu_frame(evs: list[dict[str, Any]]) -> pl.DataFrame:
    """CPU operators with their external id, recorded input shapes and autograd links."""
    args = args_of(evs)
    return event_frame(evs).with_columns(
        first_arg(args, EXTERNAL_ID).alias("external_id"),
        dims_column("input_shapes", list(map(dict.get, args, repeat("Input Dims")))),
        arg_column(args, "Sequence number").alias("seq"),
        arg_column(args, "Fwd thread id").alias("fwd_tid"),
    )


def device_frame(evs: list[dict[str, Any]]) -> pl.DataFrame:
    """Kernels, copies and sets with the arguments Kineto records for them."""
    args = args_of(evs)
    return event_frame(evs).with_columns(
        first_arg(args, DEVICE).alias("device"),
        arg_column(args, "stream"),
        arg_column(args, "correlation"),
        first_arg(args, EXTERNAL_ID).alias("external_id"),
        arg_column(args, "bytes"),
        *axis_columns(args, "grid", DIMS),
        *axis_columns(args, "block", DIMS),
    )
