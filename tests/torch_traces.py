"""Hand-written torch.profiler (Kineto) trace events for the trace reader's tests.

Times are whole microseconds so that every expected nanosecond value can be
worked out by hand (1 µs = 1000 ns).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

H100 = {
    "id": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85031714816,
    "computeMajor": 9,
    "computeMinor": 0,
    "numSms": 132,
}
MAIN, AUTOGRAD, STREAM = 100, 101, 7  # thread ids; the process is 1


def complete(cat: str, name: str, ts: float, dur: float, tid: Any = MAIN, **args: Any) -> dict:
    """A complete event ("ph": "X") of process 1 (GPU events: give pid through args)."""
    pid = args.pop("pid", 1)
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


def module(name: str, ts: float, dur: float, instance: int, tid: int = MAIN) -> dict:
    """A module frame as torch.profiler's Python tracer writes it."""
    return complete("python_function", f"nn.Module: {name}", ts, dur, tid,
                    **{"Python id": ts, "Python module id": instance})  # fmt: skip


def op(name: str, ts: float, dur: float, tid: int = MAIN, **args: Any) -> dict:
    """A CPU operator."""
    return complete("cpu_op", name, ts, dur, tid, **args)


def launch(ts: float, correlation: int, api: str = "cudaLaunchKernel", tid: int = MAIN) -> dict:
    """A launch call taking 1 µs."""
    cat = "cuda_driver" if api.startswith("cu") and not api.startswith("cuda") else "cuda_runtime"
    return complete(cat, api, ts, 1, tid, correlation=correlation)


def kernel(name: str, ts: float, dur: float, correlation: int, **args: Any) -> dict:
    """A kernel on device 0, stream 7."""
    return complete("kernel", name, ts, dur, STREAM, pid=0, device=0, stream=STREAM,
                    correlation=correlation, **args)  # fmt: skip


def flow(ph: str, flow_id: int, ts: float, tid: Any, cat: str = "fwdbwd", pid: Any = 1) -> dict:
    """A flow start ("s") or end ("f") event."""
    ev = {"ph": ph, "id": flow_id, "pid": pid, "tid": tid, "ts": ts, "cat": cat, "name": cat}
    return ev | ({"bp": "e"} if ph == "f" else {})


def write_trace(path: Path, events: list[dict], **header: Any) -> Path:
    """A trace file with `events` and header fields (an H100 unless told otherwise)."""
    doc = {"schemaVersion": 1, "deviceProperties": [H100], **header, "traceEvents": events}
    path.write_text(json.dumps(doc))
    return path
