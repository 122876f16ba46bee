"""Where `nsysmap attribute` spends its time and memory, function by function.

    python -m bench.profile EXPORT OUTDIR [--no-infer] [--json FILE]

Runs `analyse_file` (what `nsysmap attribute` runs) once with the functions
listed in TIMED wrapped: each call's wall time, the process's CPU time (all
threads, the background hash included: steadier than wall time on a shared
machine), its resident memory when the call starts and ends, and the peak
while it runs (sampled every 20 ms from /proc/self/statm). Prints one line
per function (calls, seconds, CPU seconds, RSS at entry, peak during, RSS at
exit, in GB) in the order they first ran, nested calls indented under their
caller. Measuring adds little: a wrapper per call of a few dozen functions,
a sampling thread.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import wraps
from pathlib import Path
from typing import Any

# (module, attribute) of every function timed; a dotted attribute is a method.
TIMED = [
    ("nsysmap.pipeline", "load_profile"),
    ("nsysmap.load", "_read_raw"),
    ("nsysmap.load", "normalise"),
    ("nsysmap.pipeline", "stream_ops"),
    ("nsysmap.pipeline", "attribute"),
    ("nsysmap.pipeline", "summarise"),
    ("nsysmap.pipeline", "infer_ops"),
    ("nsysmap.pipeline", "write_analysis"),
    ("nsysmap.attribution.attribute", "_with_launches"),
    ("nsysmap.attribution.attribute", "thread_keys"),
    ("nsysmap.attribution.attribute", "Scope.of"),
    ("nsysmap.attribution.attribute", "locate"),
    ("nsysmap.attribution.attribute", "_values"),
    ("nsysmap.attribution.attribute", "_labels"),
    ("nsysmap.attribution.attribute", "range_paths"),
    ("nsysmap.attribution.attribute", "_categories"),
    ("nsysmap.attribution.attribute", "_finish"),
    ("nsysmap.output.ops_sinks", "partial_summaries"),
    ("nsysmap.output.ops_sinks", "combine_summaries"),
    ("nsysmap.output.ops_sinks", "with_overlap"),
    ("nsysmap.output.summarise", "partial_summaries"),
    ("nsysmap.output.summarise", "combine_summaries"),
    ("nsysmap.output.summarise", "overlap_table"),
    ("nsysmap.output.summarise", "combine_leaves"),
    ("nsysmap.output.summarise", "by_range"),
    ("nsysmap.output.by_range", "preorder"),
    ("nsysmap.output.by_range", "_placed"),
    ("nsysmap.output.by_range", "instances"),
    ("nsysmap.output.by_range", "_paths"),
    ("nsysmap.output.by_range", "path_key_codes"),
    ("nsysmap.output.by_range", "_exclusive"),
    ("nsysmap.output.by_range", "_path_rows"),
    ("nsysmap.output.by_range", "_finished"),
    ("nsysmap.output.range_tree", "window_extrema"),
    ("nsysmap.output.range_tree", "_packed_preorder"),
    ("nsysmap.output.range_tree", "_parent_positions"),
]

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


@dataclass
class Timing:
    depth: int
    calls: int = 0
    seconds: float = 0.0
    cpu: float = 0.0  # CPU seconds of the whole process (all threads) during the calls
    entry: int = 0
    peak: int = 0
    exit: int = 0


@dataclass
class Recorder:
    timings: dict[str, Timing] = field(default_factory=dict)
    samples: list[tuple[float, int]] = field(default_factory=list)
    depth: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        while not self.stop.wait(0.02):
            self.samples.append((time.perf_counter(), rss_bytes()))

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            entry, start, cpu = rss_bytes(), time.perf_counter(), time.process_time()
            timing = self.timings.setdefault(name, Timing(self.depth))
            self.depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
                end = time.perf_counter()
                inside = [r for t, r in self.samples if start <= t <= end]
                timing.calls += 1
                timing.seconds += end - start
                timing.cpu += time.process_time() - cpu
                timing.entry = timing.entry or entry
                timing.exit = rss_bytes()
                timing.peak = max(timing.peak, entry, timing.exit, *inside)

        return timed


def install(recorder: Recorder) -> None:
    for module_name, attr in TIMED:
        module = importlib.import_module(module_name)
        owner: Any = module
        *outer, last = attr.split(".")
        for part in outer:
            owner = getattr(owner, part)
        fn = getattr(owner, last)
        if isinstance(owner, type):  # a classmethod: wrap the function, bind again
            setattr(owner, last, classmethod(recorder.wrap(attr, fn.__func__)))
        else:
            setattr(owner, last, recorder.wrap(attr, fn))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("export", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--no-infer", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    recorder = Recorder()
    install(recorder)
    from bench.nsysmap_run import attributed

    sampler = threading.Thread(target=recorder.sample, daemon=True)
    sampler.start()
    analysis, seconds = attributed(args.export, args.out_dir, infer=not args.no_infer)
    recorder.stop.set()
    peak = max([r for _, r in recorder.samples] + [rss_bytes()])
    gb = 1e9
    print(f"total {seconds:.2f} s, peak RSS {peak / gb:.2f} GB")
    print("stages: " + ", ".join(f"{k} {v:.2f}" for k, v in analysis.timings.items()))
    print(
        f"{'function':<40} {'calls':>6} {'s':>8} {'cpu s':>8} {'entry':>6} {'peak':>6} {'exit':>6}"
    )
    for name, t in recorder.timings.items():
        label = "  " * t.depth + name
        print(
            f"{label:<40} {t.calls:>6} {t.seconds:>8.2f} {t.cpu:>8.2f} "
            f"{t.entry / gb:>6.2f} {t.peak / gb:>6.2f} {t.exit / gb:>6.2f}"
        )
    if args.json:
        out = {
            "seconds": seconds,
            "peak_rss_bytes": peak,
            "stages": analysis.timings,
            "functions": {k: vars(v) for k, v in recorder.timings.items()},
        }
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
