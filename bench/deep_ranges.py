"""Deep range nesting: attribution time when ranges nest 10^5 deep on one thread.

    python -m bench.deep_ranges                  # 10^5 ranges per case
    python -m bench.deep_ranges --ranges 20000   # smaller

Three exports, written to bench/cache/ (gitignored) and timed end to end with
`analyse_file` (what `nsysmap attribute` runs), one process for all:

* open: every range is left open (NULL end, as after an exception inside a
  range): each opens inside the previous one, so they nest N deep;
* nested: N properly closed ranges, range i = [i, 2N - i) periods, half the
  kernels launched while they open (depth i), half while they close (every
  launch's innermost range is deep and most ranges started after it have
  closed again);
* same start: N ranges that all start at one instant, with distinct ends.

One kernel is launched every `--period` ranges. Prints seconds per stage, the
deepest innermost range of an operation and the longest range path written (paths keep their 8
outermost and 56 innermost names, see docs/outputs.md). Not a test.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import polars as pl

from devtools.synth.bulk import global_pid, global_tid, write_export
from nsysmap.core.scalars import to_int
from nsysmap.core.timings import Stages
from nsysmap.flow.verbs import analyse_file

CACHE = Path(__file__).parent / "cache"
PID = 7
PERIOD_NS = 1_000  # one range boundary per microsecond


def _tables(ranges: pl.DataFrame, launches: pl.Series) -> dict[str, pl.DataFrame]:
    """An export: `ranges` (start, end) on one thread, one kernel launched at each time."""
    n = launches.len()
    i = pl.int_range(n, dtype=pl.Int64, eager=True)
    thread = global_tid(PID, PID)
    return {
        "StringIds": pl.DataFrame(
            {"id": [0, 1, 2], "value": ["void deep_kernel()", "deep_kernel", "cudaLaunchKernel"]}
        ),
        "CUPTI_ACTIVITY_KIND_KERNEL": pl.DataFrame(
            {
                "start": launches + 100,
                "end": launches + 200,
                "deviceId": 0,
                "streamId": 7,
                "correlationId": i + 1,
                "globalPid": global_pid(PID),
                "demangledName": 0,
                "shortName": 1,
            }
        ),
        "CUPTI_ACTIVITY_KIND_RUNTIME": pl.DataFrame(
            {
                "start": launches,
                "end": launches + 50,
                "eventClass": 0,
                "globalTid": thread,
                "correlationId": i + 1,
                "nameId": 2,
            }
        ),
        "NVTX_EVENTS": ranges.with_row_index("k").select(
            "start",
            "end",
            eventType=pl.lit(59, pl.Int64),
            text=pl.format("r{}", "k"),
            globalTid=pl.lit(thread, pl.Int64),
            domainId=pl.lit(0, pl.Int64),
        ),
    }


def cases(n: int, period: int) -> dict[str, dict[str, pl.DataFrame]]:
    """The three exports' tables for `n` ranges and a launch every `period` ranges."""
    k = pl.int_range(n, dtype=pl.Int64, eager=True)
    every = pl.int_range(0, n, period, dtype=pl.Int64, eager=True)
    opening = every * PERIOD_NS + PERIOD_NS // 2  # just after range k opened
    closing = (2 * n - every) * PERIOD_NS - PERIOD_NS // 2  # just before range k closes
    open_chain = pl.DataFrame(
        {"start": k * PERIOD_NS, "end": pl.Series([None] * n, dtype=pl.Int64)}
    )
    nested = pl.DataFrame({"start": k * PERIOD_NS, "end": (2 * n - k) * PERIOD_NS})
    same = pl.DataFrame({"start": pl.repeat(0, n, eager=True), "end": (n - k) * PERIOD_NS + 1})
    return {
        "open": _tables(open_chain, opening),
        "nested": _tables(nested, pl.concat([opening, closing]).sort()),
        "same start": _tables(same, pl.Series([PERIOD_NS * (n - j) for j in range(0, n, period)])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranges", type=int, default=100_000)
    parser.add_argument("--period", type=int, default=10, help="ranges per kernel launch")
    args = parser.parse_args()
    CACHE.mkdir(parents=True, exist_ok=True)
    print(f"{'case':<11} {'ranges':>8} {'ops':>7} {'depth':>7} {'path':>7} {'total s':>8}  stages")
    for name, tables in cases(args.ranges, args.period).items():
        path = CACHE / f"deep-{name.replace(' ', '_')}-{args.ranges}-{args.period}.sqlite"
        path.unlink(missing_ok=True)
        write_export(path, tables)
        start = time.perf_counter()
        analysis = analyse_file(path, CACHE / "deep-out", stages=Stages(progress=False))
        total = time.perf_counter() - start
        ops = analysis.ops
        depth = to_int(ops["range_depth"].max() or 0)
        longest = to_int(ops["range_path"].str.split(" > ").list.len().max() or 0)
        stages = " ".join(f"{k} {v:.2f}" for k, v in analysis.timings.items() if k != "hash")
        print(
            f"{name:<11} {args.ranges:>8,} {ops.height:>7,} {depth:>7,} {longest:>7} "
            f"{total:>8.2f}  {stages}",
            flush=True,
        )


if __name__ == "__main__":
    main()
