"""Added cost of instrument/ per nn.Module call, when nothing listens.

A chain of small Linear layers is run forward-only (no_grad) and forward +
backward; the time per module call under each emitter, minus the time with
no instrumentation, is the overhead. Times are this thread's CPU time
(`time.thread_time`), which a busy shared machine disturbs far less than wall
time. Then the cost of one torch.profiler annotation by each way of making
one from Python. Prints medians over several runs:

    python bench/instrument_overhead.py [--modules 200] [--repeats 7]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch.nn.modules import module as nn_module

import instrument
from instrument.ranges import emitters


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


class _NullEmitter:
    """Listens always, records nothing: the cost of the hooks' own bookkeeping."""

    def prepare(self, name: str) -> str:
        return name

    def push(self, payload: str) -> None:
        return None

    def pop(self, token: object) -> None:
        return None


def _conditions() -> dict[str, object]:
    """Emit choices measured; None means no instrumentation at all."""
    conditions: dict[str, object] = {"none": None, "off": "off", "nvtx": "nvtx", "torch": "torch"}
    conditions["torch's no-op global hooks"] = "noop-hooks"
    conditions["listening: no-op emitter"] = _NullEmitter()
    try:
        import nvtx

        # Emission forced into the nvtx package even though no tool listens.
        domain = nvtx.get_domain("nsysmap-bench")
        conditions["listening: nvtx into dummy domain"] = emitters.NvtxEmitter(domain)
    except ImportError:
        pass
    return conditions


@contextmanager
def _instrumented(model: torch.nn.Module, emit: object) -> Iterator[None]:
    """Install one condition: nothing, torch's bare global hooks, or instrument/."""
    if emit is None:
        yield
        return
    if emit == "noop-hooks":
        handles = [
            nn_module.register_module_forward_pre_hook(lambda m, a: None),
            nn_module.register_module_forward_hook(lambda m, a, o: None, always_call=True),
            nn_module.register_module_full_backward_pre_hook(lambda m, g: None),
            nn_module.register_module_full_backward_hook(lambda m, gi, go: None),
        ]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
        return
    instrument.install(model, emit=emit)
    try:
        yield
    finally:
        instrument.uninstall()


def measure(n_modules: int, repeats: int, iterations: int) -> dict[str, dict[str, float]]:
    """Median seconds per module call, by workload and condition."""
    model = _chain(n_modules)
    results: dict[str, dict[str, list[float]]] = {}
    for _ in range(repeats):
        for cond, emit in _conditions().items():
            with _instrumented(model, emit):
                for work, fn in _workloads(model).items():
                    per_call = _timed(fn, iterations) / iterations / n_modules
                    results.setdefault(work, {}).setdefault(cond, []).append(per_call)
    return {w: {c: statistics.median(v) for c, v in r.items()} for w, r in results.items()}


def _range_variants() -> dict[str, Callable[[], None]]:
    """Ways to open and close one torch.profiler annotation from Python."""
    enter = torch.ops.profiler._record_function_enter_new
    leave = torch.ops.profiler._record_function_exit._RecordFunction
    fast = torch._C._profiler._RecordFunctionFast

    def context_manager() -> None:
        with torch.profiler.record_function("nsysmap:bench"):
            pass

    def explicit() -> None:  # what TorchEmitter does: the hooks open and close separately
        handle = torch.profiler.record_function("nsysmap:bench")
        handle.__enter__()
        handle.__exit__(None, None, None)

    def raw_ops() -> None:  # private ops under record_function
        handle = enter("nsysmap:bench", None)
        with torch._C.DisableTorchFunctionSubclass():
            leave(handle)

    def fast_private() -> None:  # private; recorded as cpu_op, not user_annotation
        with fast("nsysmap:bench"):
            pass

    def gate_only() -> None:  # TorchEmitter.push when no profiler is active
        torch.autograd._profiler_enabled()

    return {
        "record_function, with": context_manager,
        "record_function, __enter__/__exit__": explicit,
        "torch.ops.profiler enter/exit": raw_ops,
        "_RecordFunctionFast": fast_private,
        "_profiler_enabled() check only": gate_only,
    }


def measure_ranges(repeats: int, iterations: int = 2000) -> dict[str, dict[str, float]]:
    """Median seconds per range (open + close), with and without an active profiler."""
    results: dict[str, dict[str, list[float]]] = {}
    for _ in range(repeats):
        for active in (False, True):
            label = "profiler active" if active else "no profiler"
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            if active:
                prof.start()
            try:
                for name, fn in _range_variants().items():
                    seconds = _timed(fn, iterations) / iterations
                    results.setdefault(label, {}).setdefault(name, []).append(seconds)
            finally:
                if active:
                    prof.stop()
    return {k: {n: statistics.median(v) for n, v in r.items()} for k, r in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # torch's full-backward-hook warnings, bare-hooks row
    results = measure(args.modules, args.repeats, args.iterations)
    print(
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} intra-op thread(s), {args.modules} Linear(8, 8) modules, "
        f"median of {args.repeats} runs x {args.iterations} iterations"
    )
    for work, by_cond in results.items():
        base = by_cond["none"]
        print(f"\n{work}: µs per module call (added over no instrumentation)")
        for cond, value in by_cond.items():
            print(f"  {cond:34s} {value * 1e6:8.2f}   (+{(value - base) * 1e6:.2f})")
    for label, by_variant in measure_ranges(args.repeats).items():
        print(f"\none torch.profiler annotation, {label}: µs per open+close")
        for name, value in by_variant.items():
            print(f"  {name:38s} {value * 1e6:8.2f}")


if __name__ == "__main__":
    main()
