"""`nsysmap attribute` as the benchmark runs it, with its stage timings.

    python -m bench.nsysmap_run EXPORT OUTDIR [--memory-gb GB] [--windows N]

Runs `nsysmap.flow.verbs.analyse_file` (what the `nsysmap attribute` command
runs) with progress off and prints one JSON line: seconds per stage, and
how the export was read (`read_as`: whole, by process, or in time windows,
with the reason a split was refused). `--windows N` reads a one-process
export N time windows at a time (NSYSMAP_WINDOWS, nsysmap.sources.by_window).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from nsysmap.core.allocator import hand_back

hand_back()  # as the console script does, before Polars loads (nsysmap.core.allocator)

from nsysmap.core.timings import Stages  # noqa: E402
from nsysmap.flow.verbs import Analysis, analyse_file  # noqa: E402
from nsysmap.sources.by_window import META_KEY, REFUSED_KEY  # noqa: E402
from nsysmap.sources.choose import WINDOWS_ENV  # noqa: E402


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


# report_meta keys that say how an export was read, as `read_as` names them.
READ_AS = {"processes_read_apart": "processes", META_KEY: "windows", REFUSED_KEY: "refused"}


def read_as(analysis: Analysis) -> dict[str, str]:
    """How the export was read: the split (processes or windows) and any refusal."""
    meta = analysis.profile.meta
    keys = meta.filter(meta["key"].is_in(list(READ_AS)))
    return {READ_AS[k]: str(v) for k, v in zip(keys["key"], keys["value"], strict=True)}


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
    timed = {"seconds": seconds, "stages": analysis.timings, "read_as": read_as(analysis)}
    print(json.dumps(timed))


if __name__ == "__main__":
    main()
