"""An export shaped like the largest one users report, at any scale: for the benchmark.

The report (one training job, a 3.5 GB nsys export): 2.2 million kernels,
7.1 million CUDA runtime calls and 15.9 million NVTX ranges on 5 threads,
with operator ranges nested deep. `user_shaped_tables(scale)` gives the
tables of such an export (for `write_export`) with USER_SHAPE's counts times
`scale`: the GPT-2-like training step of `devtools.synth.gpt`, one process on
one GPU, tiled by `devtools.synth.tile`, with per step:

* every operator call one contiguous copy deeper (three more operator ranges
  around its kernels), so ranges nest a dozen deep on the main thread;
* two more runtime calls per kernel launch (`cudaStreamIsCapturing`,
  `cudaGetDevice`, as PyTorch's launch path makes them);
* three more threads: two data-loader threads and the NCCL watchdog, with
  nested ranges of their own, and the watchdog's `cudaEventQuery` polls, as
  many as bring the step's calls and ranges to the reported ratios.

The ratios hold per step, so a tiny scale (a few steps) has the same shape.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from devtools.synth import gpt
from devtools.synth.gpt2_model import Op
from devtools.synth.tile import THREAD_NAMES, gpt_tables


@dataclass(frozen=True)
class Shape:
    """The counts of an export."""

    kernels: int
    runtime_calls: int
    ranges: int  # NVTX push/pop and start/end ranges
    threads: int  # threads with ranges


USER_SHAPE = Shape(kernels=2_200_000, runtime_calls=7_100_000, ranges=15_900_000, threads=5)
LOADERS, WATCHDOG = (2, 3), 4  # the thread slots beyond gpt.MAIN and gpt.AUTOGRAD
NAMES = (*THREAD_NAMES, "pt_data_loader_0", "pt_data_loader_1", "pt_nccl_watchdog")
DEEPER = ("aten::contiguous", "aten::clone", "aten::copy_")  # around each operator's kernels
LAUNCH_CALLS = ("cudaStreamIsCapturing_v10000", "cudaGetDevice_v3020")
POLL = "cudaEventQuery_v3020"
# The nested ranges each extra thread opens, outermost first.
OWN_RANGES = {
    2: ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "collate", "aten::stack"),
    3: ("pin_memory", "aten::pin_memory", "aten::_pin_memory"),
    4: ("ProcessGroupNCCL::watchdog", "ProcessGroupNCCL::checkTimeout", "ncclCommGetAsyncError"),
}


class _DeepTracer(gpt.Tracer):
    """gpt's tracer with operator ranges nested deeper and more calls per launch."""

    def __init__(self, rnd: random.Random) -> None:
        super().__init__(rnd)
        self.cpu.update({slot: 0 for slot in (*LOADERS, WATCHDOG)})

    def op(self, thread: int, op: Op, seq: int | None = None, *, stashed: bool = False) -> None:
        deeper = Op(op.chain + DEEPER, op.kernels, op.sizes, op.node, op.backward)
        super().op(thread, deeper if op.kernels else op, seq, stashed=stashed)

    def kernel(self, thread: int, key: str, stream: int = gpt.COMPUTE_STREAM) -> None:
        for api in LAUNCH_CALLS:
            self.call(thread, api)
        super().kernel(thread, key, stream)


def _fill_ranges(out: gpt.Template, count: int) -> None:
    """`count` more ranges on the extra threads: nested groups spread over the step."""
    slots = sorted(OWN_RANGES)
    groups = [(slots[g % len(slots)], g) for g in range(-(-count // 3))]
    width = out.period_ns // max(1, -(-len(groups) // len(slots)))
    left = count
    for slot, g in groups:
        at = (g // len(slots)) * width
        for depth, text in enumerate(OWN_RANGES[slot][: min(3, left)]):
            start, end = at + 10 * depth, at + width * 4 // 5 - 10 * depth
            out.ranges.append({"thread": slot, "text": text, "start": start, "end": end})
            left -= 1


def _fill_calls(out: gpt.Template, count: int) -> None:
    """`count` cudaEventQuery polls of the watchdog, evenly over the step."""
    width = out.period_ns // max(1, count)
    for k in range(count):
        start = k * width + width // 2
        out.calls.append({"thread": WATCHDOG, "api": POLL, "start": start, "end": start + 400})


def user_step(n_layer: int, rnd: random.Random, shape: Shape = USER_SHAPE) -> gpt.Template:
    """One training step with `shape`'s calls and ranges per kernel (a `tile` template)."""
    out = gpt.step_template(n_layer, rnd, _DeepTracer(rnd))
    kernels = sum(g["kind"] == "kernel" for g in out.gpu)
    ranges = round(kernels * shape.ranges / shape.kernels) - len(out.ranges)
    calls = round(kernels * shape.runtime_calls / shape.kernels) - len(out.calls)
    if ranges < 0 or calls < 0:
        raise ValueError(f"a step already has more ranges or calls than {shape} allows")
    _fill_ranges(out, ranges)
    _fill_calls(out, calls)
    return out


def user_shaped_tables(scale: float = 1.0, *, seed: int = 0) -> dict[str, Any]:
    """The tables of an export shaped like USER_SHAPE, its counts times `scale` (whole
    steps: at least one)."""
    return gpt_tables(
        round(USER_SHAPE.kernels * scale),
        seed=seed,
        processes=1,
        template=user_step,
        thread_names=NAMES,
    )
