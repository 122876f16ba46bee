"""`python -m bench.many`: several rank reports at once on a local Dask cluster.

For each number of ranks (default 16, 64, 256), one synthetic export per rank
of about --kernels kernels (devtools.synth.ddp_ranks: one process per file, GPT-2
with 12 layers, rank --slow-rank three times slower in --slow-layer, cached
in bench/cache/), attributed by `run_many` on a LocalCluster of each number
of workers (default 1 and 2, one thread each), after an untimed warm-up
(Dask imported, every export read once). Reports the wall time of the
whole run (cluster start-up included), the sum of the per-report task
times, the peak RSS of each worker process (its maximum over the tasks it
ran) against the planner's estimate, and the slow rank, slow layer and
straggler cost the run found, checked against the job's design. Writes the
runs as JSON and a Markdown table (--out). Not a test; run on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from importlib import metadata
from pathlib import Path

import psutil

from bench.measure import compile_packages
from devtools.synth.ddp_ranks import Job, rank_file, write_rank
from nsysmap.core.scalars import to_float
from nsysmap.many import ClusterOptions, run_many
from nsysmap.many.cluster import task_bytes
from nsysmap.many.ranks_text import findings, slow_layer

CACHE = Path(__file__).parent / "cache"
RESULTS = Path(__file__).parent / "results"
GENERATOR_VERSION = 1


def machine() -> dict[str, object]:
    """What the benchmark ran on, and how busy the machine was when it started."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "unknown",
    )
    packages = ("polars", "pyarrow", "dask", "distributed", "adbc-driver-sqlite")
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average_1min": os.getloadavg()[0],
        "python": platform.python_version(),
        **{name: metadata.version(name) for name in packages},
    }


def rank_exports(world: int, n_kernels: int, job: Job) -> Path:
    """The cached directory of `world` rank exports (written when missing)."""
    name = f"ranks-{world}x{n_kernels}-slow{job.slow_rank}-{job.slow_module}-v{GENERATOR_VERSION}"
    directory = CACHE / name
    done = directory / ".complete"
    if done.exists():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for rank in range(world):
        if not rank_file(directory, rank).exists():
            write_rank(directory, job, rank, n_kernels)
    done.touch()
    size = sum(p.stat().st_size for p in directory.glob("*.sqlite")) / 1e9
    print(f"generated {world} rank exports ({size:.2f} GB) in {time.perf_counter() - start:.0f} s")
    return directory


def warm(directory: Path) -> None:
    """Untimed: import Dask in this process and read every export once (page cache)."""
    import distributed  # noqa: F401 (imported lazily by nsysmap.many; not part of a run)

    for path in sorted(directory.glob("*.sqlite")):
        with path.open("rb") as fh:
            while fh.read(1 << 24):
                pass


def one_run(directory: Path, workers: int, job: Job) -> dict:
    """Attribute every rank of `directory` on `workers` local workers."""
    out = Path(tempfile.mkdtemp(prefix="nsysmap-many-"))
    try:
        start = time.perf_counter()
        where = ClusterOptions(workers=workers, threads_per_worker=1)
        result = run_many([directory], out, where=where, progress=False)
        wall = time.perf_counter() - start
    finally:
        shutil.rmtree(out, ignore_errors=True)
    found = findings(result.manifest, result.tables)
    layer = slow_layer(result.tables["rank_module"])
    peaks: dict[str, int] = {}
    for o in result.outcomes:
        peaks[o.worker] = max(peaks.get(o.worker, 0), o.worker_peak_rss_bytes)
    sizes = [p.stat().st_size for p in directory.glob("*.sqlite")]
    return {
        "ranks": len(result.outcomes),
        "workers": workers,
        "wall_s": wall,
        "task_s_sum": sum(o.seconds for o in result.outcomes),
        "failed": len(result.failed),
        "worker_peak_rss_bytes": sorted(peaks.values()),
        "estimated_task_bytes": task_bytes(max(sizes)),
        "input_bytes": sum(sizes),
        "slowest_rank": found.slowest["rank"] if found.slowest else None,
        "slow_layer": layer["module"] if layer else None,
        "straggler_cost_ms": to_float(result.tables["stragglers"]["straggler_cost_ns"].sum()) / 1e6,
        "load_average_1min": os.getloadavg()[0],
        "found_as_designed": bool(
            found.slowest
            and found.slowest["rank"] == job.slow_rank
            and layer
            and layer["module"] == job.slow_module
        ),
    }


def markdown(runs: list[dict], kernels: int) -> str:
    head = (
        "| ranks | kernels per rank | workers | wall (s) | sum of task times (s) | "
        "peak RSS per worker (GB) | estimate per task (GB) | slowest rank | slow layer | "
        "straggler cost (ms) |\n|---:|---:|---:|---:|---:|---|---:|---:|---|---:|\n"
    )
    rows = [
        f"| {r['ranks']} | {kernels:,} | {r['workers']} | {r['wall_s']:.1f} | "
        f"{r['task_s_sum']:.1f} | "
        + ", ".join(f"{b / 1e9:.2f}" for b in r["worker_peak_rss_bytes"])
        + f" | {r['estimated_task_bytes'] / 1e9:.2f} | {r['slowest_rank']} | "
        f"{r['slow_layer']} | {r['straggler_cost_ms']:,.1f} |"
        for r in runs
    ]
    return head + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.many", description=__doc__)
    parser.add_argument("--ranks", default="16,64,256", help="numbers of ranks (comma-separated)")
    parser.add_argument("--workers", default="1,2", help="numbers of local workers")
    parser.add_argument("--kernels", type=float, default=1e5, help="kernels per rank export")
    parser.add_argument("--slow-rank", type=int, default=5)
    parser.add_argument("--slow-layer", default="transformer.h.7")
    parser.add_argument("--out", type=Path, default=RESULTS / "many-latest.json")
    args = parser.parse_args(argv)
    kernels = int(args.kernels)
    compile_packages()  # as an installed package: no worker compiles nsysmap's modules
    runs = []
    for world in [int(x) for x in args.ranks.split(",")]:
        job = Job(world, slow_rank=args.slow_rank, slow_module=args.slow_layer, module_factor=3.0)
        directory = rank_exports(world, kernels, job)
        warm(directory)
        for workers in [int(x) for x in args.workers.split(",")]:
            run = one_run(directory, workers, job)
            print(json.dumps(run), flush=True)
            runs.append(run)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine(), "runs": runs}, indent=2) + "\n")
    table = markdown(runs, kernels)
    args.out.with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
