"""`nsysmap attribute` as the benchmark runs it, with its stage timings.

    python -m bench.nsysmap_run EXPORT OUTDIR [--memory-gb GB] [--windows N]

Runs `nsysmap.pipeline.analyse_file` (what the `nsysmap attribute` command
runs) with progress off and prints one JSON line: seconds per stage.
`--windows N` reads a one-process export N time windows at a time
(NSYSMAP_WINDOWS, nsysmap.by_window).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from nsysmap.by_window import WINDOWS_ENV
from nsysmap.pipeline import Analysis, analyse_file
from nsysmap.stages import Stages


def attributed(
    export: Path,
    out_dir: Path,
    *,
    infer: bool = True,
    memory_gb: float | None = None,
    stages: Stages | None = None,
) -> tuple[Analysis, float]:
    """`nsysmap attribute` on `export` with progress off (or timed by `stages`),
    and its wall seconds."""
    start = time.perf_counter()
    analysis = analyse_file(
        export,
        out_dir,
        options={"command": "attribute"},
        stages=stages or Stages(progress=False),
        infer=infer,
        memory_gb=memory_gb,
    )
    return analysis, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("export", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--memory-gb", type=float, help="as `nsysmap attribute --memory-gb`")
    parser.add_argument("--windows", type=int, help="time windows of a one-process export")
    args = parser.parse_args()
    if args.windows:
        os.environ[WINDOWS_ENV] = str(args.windows)
    analysis, seconds = attributed(args.export, args.out_dir, memory_gb=args.memory_gb)
    print(json.dumps({"seconds": seconds, "stages": analysis.timings}))


if __name__ == "__main__":
    main()
