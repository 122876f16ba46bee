"""Where `nsysmap attribute` spends its time and memory: per stage, then per function.

    python -m bench.profile EXPORT OUTDIR [--no-infer] [--memory-gb GB]
                            [--functions N] [--asked N] [--clock wall|cpu]
                            [--json FILE]

Runs `analyse_file` (what `nsysmap attribute` runs) once and prints:

* per stage of the flow, as the flow itself names and times them (a `Stages`
  that also records memory): seconds, the process's CPU seconds (all threads,
  the background hash included: steadier than wall time on a shared machine)
  and resident memory at entry, peak during and at exit (GB; sampled every
  20 ms from /proc/self/statm). Stages the flow times in interleaved pieces
  (attribute and summarise, block by block) get their seconds only; their
  memory is that of the window they run in (`attributing`);
* the N functions of nsysmap with the most cumulative time (cProfile, main
  thread; calls, own seconds, cumulative seconds), so that nothing here names
  a function of the flow that may be renamed. `--clock cpu` times them in
  CPU seconds of the whole process (every thread: Polars' pool, the readers,
  the background hash) instead of wall seconds: steadier on a shared machine.

* with `--asked N`, the N functions of nsysmap that asked for the most
  native time (Polars' engine, NumPy, Arrow, the SQLite driver, waits for
  other threads), each native call given to the nearest nsysmap function on
  its stack (bench.native_time): which of nsysmap's queries and array passes
  the time went to, not only which stage. Measured in a second run of the
  flow (its hook and cProfile cannot watch one run together); the stage
  table is the first run's.

Measuring adds a sampling thread and cProfile's cost per Python call (small:
the work is in Polars and Arrow); `--functions 0` leaves cProfile off.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nsysmap.core.allocator import hand_back

hand_back()  # as the console script does, before Polars loads (nsysmap.core.allocator)

import nsysmap  # noqa: E402
from bench.native_time import NativeTime, package_module  # noqa: E402
from nsysmap.core.timings import Stages  # noqa: E402

_PAGE = os.sysconf("SC_PAGE_SIZE")
GB = 1e9
# Functions whose file is in the package (not merely below a folder named nsysmap,
# such as a checkout's own root).
PACKAGE = str(Path(nsysmap.__file__).resolve().parent) + os.sep


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


@dataclass
class Window:
    """One stage (or progress window) of the flow: time and memory while it ran."""

    seconds: float = 0.0
    cpu: float = 0.0
    entry: int = 0
    peak: int = 0
    exit: int = 0
    calls: int = 0


@dataclass
class Sampler:
    """Resident memory every 20 ms on a background thread."""

    samples: list[tuple[float, int]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.wait(0.02):
            self.samples.append((time.perf_counter(), rss_bytes()))

    def peak(self, start: float, end: float) -> int:
        return max((r for t, r in self.samples if start <= t <= end), default=0)


class RecordingStages(Stages):
    """The flow's own stage timer, also recording CPU time and memory per window."""

    def __init__(self, sampler: Sampler) -> None:
        super().__init__(progress=False)
        self.sampler = sampler
        self.windows: dict[str, Window] = {}
        self._in_stage = 0

    @contextmanager
    def _window(self, name: str) -> Iterator[None]:
        entry, start, cpu = rss_bytes(), time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            end, exit_ = time.perf_counter(), rss_bytes()
            w = self.windows.setdefault(name, Window(entry=entry))
            w.seconds += end - start
            w.cpu += time.process_time() - cpu
            w.exit, w.calls = exit_, w.calls + 1
            w.peak = max(w.peak, entry, exit_, self.sampler.peak(start, end))

    @contextmanager
    def stage(self, name: str, label: str | None = None) -> Iterator[None]:
        self._in_stage += 1
        try:
            with self._window(name), super().stage(name, label):
                yield
        finally:
            self._in_stage -= 1

    @contextmanager
    def progress(self, label: str) -> Iterator[None]:
        if self._in_stage:  # the progress line of a stage: recorded as the stage
            with super().progress(label):
                yield
            return
        with self._window(label), super().progress(label):
            yield


def functions(profile: cProfile.Profile, top: int) -> list[dict]:
    """The `top` nsysmap functions by cumulative time."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    rows = []
    for (file, line, name), (_, calls, own, cumulative, _) in stats.items():
        module = package_module(file, PACKAGE)
        if module is not None:
            rows.append(
                {"function": f"{module}.{name}", "line": line, "calls": calls}
                | {"own_s": own, "cumulative_s": cumulative}
            )
    return sorted(rows, key=lambda r: -r["cumulative_s"])[:top]


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def native_time(
    export: Path, out_dir: Path, infer: bool, memory_gb: float | None, clock: str, top: int
) -> dict:
    """One more run of the flow on `export` (bench.native_time): the `top` nsysmap
    functions by the native time they asked for (`asked`), and the native and whole
    seconds of that run."""
    from bench.nsysmap_run import attributed

    hook = NativeTime(PACKAGE, CLOCKS[clock])
    with hook.running():
        attributed(export, out_dir, infer=infer, memory_gb=memory_gb, stages=Stages(progress=False))
    return {"asked": hook.top(top), "native_s": hook.native_s(), "asked_run_s": hook.seconds}


def profiled(
    export: Path,
    out_dir: Path,
    *,
    infer: bool,
    memory_gb: float | None,
    top: int,
    clock: str = "wall",
    asks: int = 0,
) -> dict:
    """One run of the flow on `export`, measured per stage and per function; the `asks`
    nsysmap functions that asked for the most native time."""
    from bench.nsysmap_run import attributed

    sampler = Sampler()
    threading.Thread(target=sampler.run, daemon=True).start()
    stages = RecordingStages(sampler)
    profile = cProfile.Profile(CLOCKS[clock]) if top else None
    if profile:
        profile.enable()
    analysis, seconds = attributed(export, out_dir, infer=infer, memory_gb=memory_gb, stages=stages)
    if profile:
        profile.disable()
    sampler.stop.set()
    return {
        "seconds": seconds,
        "peak_rss_bytes": max(
            [r for _, r in sampler.samples]
            + [w.peak for w in stages.windows.values()]
            + [rss_bytes()]
        ),
        "stages": analysis.timings,
        "windows": {k: asdict(v) for k, v in stages.windows.items()},
        "functions": functions(profile, top) if profile else [],
        **(native_time(export, out_dir, infer, memory_gb, clock, asks) if asks else {}),
        "clock": clock,
    }


def _window_cells(w: dict) -> str:
    return f"{w['cpu']:>8.2f} " + " ".join(f"{w[k] / GB:>6.2f}" for k in ("entry", "peak", "exit"))


def text(result: dict) -> str:
    """The stage table, then the function table."""
    lines = [f"total {result['seconds']:.2f} s, peak RSS {result['peak_rss_bytes'] / GB:.2f} GB"]
    lines += ["", f"{'stage':<22} {'s':>8} {'cpu s':>8} {'entry':>6} {'peak':>6} {'exit':>6}"]
    windows = result["windows"]
    for name, seconds in result["stages"].items():
        cells = _window_cells(windows[name]) if name in windows else ""
        lines.append(f"{name:<22} {seconds:>8.2f} {cells}".rstrip())
    for label, w in windows.items():
        if label not in result["stages"]:  # a progress window holding interleaved stages
            lines.append(f"{'(' + label + ')':<22} {w['seconds']:>8.2f} {_window_cells(w)}")
    lines.append("(RSS in GB: at entry, peak during, at exit; stages without them ran in a window)")
    if result["functions"]:
        lines += [
            "",
            f"{'function (by cumulative ' + result.get('clock', 'wall') + ' time)':<60} "
            f"{'calls':>7} {'own s':>8} {'cum s':>8}",
        ]
        for f in result["functions"]:
            name = f"{f['function']}:{f['line']}"
            lines.append(f"{name:<60} {f['calls']:>7} {f['own_s']:>8.2f} {f['cumulative_s']:>8.2f}")
    if result.get("asked"):
        clock = result.get("clock", "wall")
        lines += [
            "",
            f"{'function (by native ' + clock + ' time asked for)':<60} {'s':>8} {'share':>7}",
        ]
        for f in result["asked"]:
            name = f"{f['function']}:{f['line']}"
            lines.append(f"{name:<60} {f['native_s']:>8.2f} {f['share']:>7.1%}")
        native, whole = result["native_s"], result["asked_run_s"]
        lines.append(
            f"(native calls: {native:.2f} s of that run's {whole:.2f} s on the main thread;"
            " share: of the native time)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("export", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--no-infer", action="store_true")
    parser.add_argument("--memory-gb", type=float, help="as `nsysmap attribute --memory-gb`")
    parser.add_argument("--functions", type=int, default=25, help="top N functions; 0: off")
    parser.add_argument(
        "--asked",
        type=int,
        default=0,
        help="top N functions by native time asked for (a second run)",
    )
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall", help="what the function table counts"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = profiled(
        args.export,
        args.out_dir,
        infer=not args.no_infer,
        memory_gb=args.memory_gb,
        top=args.functions,
        clock=args.clock,
        asks=args.asked,
    )
    print(text(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
