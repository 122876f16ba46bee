"""Added wall time per training step of instrument/, on whatever device is present.

GPT-2 (examples/train_gpt2.py's model) trains on fixed random tokens; each
condition runs `--warmup` steps, then times `--steps` steps one by one (with a
device synchronisation around each) and prints the median, min and max step
time and the median's difference from the uninstrumented run:

    plain                      no instrumentation, no profiler
    instrumented, emit=off     hooks installed, nothing emitted
    instrumented, emit=nvtx    NVTX ranges (no NVTX tool attached: near no-ops)
    instrumented, emit=torch   torch.profiler annotations, no profiler running
    profiler                   torch.profiler (CPU+CUDA activities), no instrumentation
    profiler + instrumented    the same with nsysmap's ranges (what `nsysmap run` records)

    python bench/step_overhead.py --size small --batch 8 --seq-len 512 --steps 20
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

import instrument

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from train_gpt2 import SIZES, fixed_batch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step_times(step: Callable[[], None], device: torch.device, warmup: int, n: int) -> list[float]:
    for _ in range(warmup):
        step()
    _sync(device)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - start)
    return times


@contextlib.contextmanager
def _condition(name: str, model: torch.nn.Module, optimizer: object) -> Iterator[None]:
    cuda = next(model.parameters()).is_cuda
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with contextlib.ExitStack() as stack:
        if name.startswith("profiler"):
            stack.enter_context(profile(activities=activities))
        emit = {"off": "off", "nvtx": "nvtx", "torch": "torch"}.get(name.rsplit("=", 1)[-1])
        if "instrumented" in name:
            stack.enter_context(instrument.annotate(model, optimizer, emit=emit or "torch"))
        yield


CONDITIONS = (
    "plain",
    "instrumented, emit=off",
    "instrumented, emit=nvtx",
    "instrumented, emit=torch",
    "profiler",
    "profiler + instrumented",
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=None)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model first")
    args = parser.parse_args(argv)
    device, model, tokens, optimizer = fixed_batch(args.size, args.batch, args.seq_len, args.device)
    if args.compile:
        model = torch.compile(model)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        model(tokens, labels=tokens).loss.backward()
        optimizer.step()

    cuda = device.type == "cuda"
    where = torch.cuda.get_device_name(device) if cuda else platform.processor() or "CPU"
    size = args.size + " compiled" * args.compile
    print(f"GPT-2 {size}, batch {args.batch}x{tokens.shape[1]}, {where}, torch {torch.__version__}")
    print(f"{'condition':28} {'median ms':>10} {'min':>8} {'max':>8} {'vs plain':>9}")
    base = None
    for name in CONDITIONS:
        with _condition(name, model, optimizer):
            times = _step_times(step, device, args.warmup, args.steps)
        med = statistics.median(times) * 1e3
        base = med if base is None else base
        print(
            f"{name:28} {med:10.2f} {min(times) * 1e3:8.2f} {max(times) * 1e3:8.2f} "
            f"{(med - base) / base:+9.1%}"
        )


if __name__ == "__main__":
    main()
