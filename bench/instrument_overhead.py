"""Added cost of instrument/ per nn.Module call, when nothing listens.

A chain of small Linear layers is run forward-only (no_grad) and forward +
backward; the time per module call under each emitter, minus the time with
no instrumentation, is the overhead. Prints medians over several runs:

    python bench/instrument_overhead.py [--modules 200] [--repeats 7]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

import torch

import instrument
from instrument import emitters


def _chain(n_modules: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*(torch.nn.Linear(8, 8) for _ in range(n_modules)))


def _timed(fn: Callable[[], None], iterations: int) -> float:
    fn()  # warm up
    start = time.thread_time()
    for _ in range(iterations):
        fn()
    return time.thread_time() - start


def _workloads(model: torch.nn.Module) -> dict[str, Callable[[], None]]:
    x = torch.randn(4, 8)

    def forward_only() -> None:
        with torch.no_grad():
            model(x)

    def forward_backward() -> None:
        model(x).sum().backward()

    return {"forward (no_grad)": forward_only, "forward+backward": forward_backward}


def _conditions() -> dict[str, object]:
    """Emit choices measured; None means no instrumentation at all."""
    conditions: dict[str, object] = {"none": None, "off": "off", "nvtx": "nvtx", "torch": "torch"}
    try:
        import nvtx

        # Emission forced into the nvtx package even though no tool listens.
        domain = nvtx.get_domain("nsysmap-bench")
        conditions["nvtx (forced into dummy domain)"] = emitters.NvtxEmitter(domain)
    except ImportError:
        pass
    return conditions


def measure(n_modules: int, repeats: int, iterations: int) -> dict[str, dict[str, float]]:
    """Median seconds per module call, by workload and condition."""
    model = _chain(n_modules)
    results: dict[str, dict[str, list[float]]] = {}
    for _ in range(repeats):
        for cond, emit in _conditions().items():
            session = instrument.install(model, emit=emit) if emit is not None else None
            try:
                for work, fn in _workloads(model).items():
                    per_call = _timed(fn, iterations) / iterations / n_modules
                    results.setdefault(work, {}).setdefault(cond, []).append(per_call)
            finally:
                if session is not None:
                    instrument.uninstall()
    return {w: {c: statistics.median(v) for c, v in r.items()} for w, r in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = measure(args.modules, args.repeats, args.iterations)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} intra-op thread(s), {args.modules} Linear(8, 8) modules, "
          f"median of {args.repeats} runs x {args.iterations} iterations")
    for work, by_cond in results.items():
        base = by_cond["none"]
        print(f"\n{work}: µs per module call (added over no instrumentation)")
        for cond, value in by_cond.items():
            print(f"  {cond:34s} {value * 1e6:8.2f}   (+{(value - base) * 1e6:.2f})")


if __name__ == "__main__":
    main()
