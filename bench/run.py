"""`python -m bench`: attribution time and memory on synthetic GPT-2-like exports.

For each size (kernels; ranges are about three times as many) the cached
export (bench/generate.py) is read once to warm the page cache, then each
engine runs in its own process, runs interleaved:

* floor (adbc), floor (connectorx): only reading the columns attribution
  needs into Arrow (bench/floor.py); the faster is "the floor";
* nsysmap: `nsysmap attribute` end to end, with its stage timings
  (bench/nsysmap_run.py);
* sql: the straightforward attribution in SQLite with indexes
  (bench/sql_engine.py);
* nsys-ai, when installed in .venv-peers (`make peers`; bench/peers.py):
  its NVTX layer breakdown, killed at --peer-timeout (a result, "> limit").

With --one-process SIZES, also exports of one process of those sizes,
where nsysmap cannot split by process: the "nsysmap" engine reads them as
the memory budget decides (whole, or in time windows chosen for the budget)
and "nsysmap (by window)" always in 8 windows. With --user-shaped SCALE,
also the export shaped like the large one users report (bench/generate.py
`user_export`: one process, 2.2 M kernels, 7.1 M runtime calls, 15.9 M
NVTX ranges on 5 threads at scale 1). Each is rows of the same table, and
the table says how nsysmap read each export (whole, by process, in windows,
or why a split was refused).

Reports the median wall time, its spread (min..max), peak RSS, time per
kernel and the ratio to the floor; checks that nsysmap and SQL give the
same totals per range; writes the results to --out (JSON) and a Markdown
table next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import compare, generate, peers
from bench.engines import ENGINES as ALL_ENGINES
from bench.engines import Engine, available
from bench.measure import Run, compile_packages, machine, run_child, summary, warm
from bench.report import markdown

RESULTS = Path(__file__).parent / "results"
WINDOW_ENGINE = "nsysmap (by window)"
ENGINES = ("floor", "nsysmap", "sql", "nsys-ai")  # families, for --engines
LARGE = 10_000_000  # sizes from here on use the --large-* run counts
USER_LARGE = 0.5  # user-shaped scales from here on too (15.9 M ranges at 1)


def _counts(path: Path) -> dict[str, int]:
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as conn:
        count = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        return {
            "kernels": count("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"),
            "ranges": count("SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60)"),
            "api_calls": count("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME"),
            "file_bytes": path.stat().st_size,
        }


def _plan(args: argparse.Namespace, large: bool) -> dict[str, int]:
    runs = args.large_runs if large else args.runs
    return {
        "floor": runs if "floor" in args.engines else 0,
        "nsysmap": runs if "nsysmap" in args.engines else 0,
        "sql": (args.sql_large_runs if large else args.sql_runs) if "sql" in args.engines else 0,
        "nsys-ai": (args.peer_large_runs if large else args.peer_runs)
        if "nsys-ai" in args.engines
        else 0,
    }


def output_dir(work: Path, engine: str) -> Path:
    """Where an nsysmap engine writes its outputs: one folder per engine, so no
    engine's run overwrites another's."""
    return work / engine.replace(" (", "-").replace(")", "").replace(" ", "-")


def _child_args(engine: Engine, path: Path, work: Path) -> tuple[str, ...]:
    """The command line of one run of `engine` on the export at `path`."""
    if engine.family == "floor":
        return (str(path), *engine.args)
    if engine.family == "nsysmap":
        return (str(path), str(output_dir(work, engine.name)), *engine.args)
    return (str(path), str(work), *engine.args)


def bench_size(
    args: argparse.Namespace,
    n: int,
    engines: list[Engine],
    others: Sequence[peers.Peer] = (),
    *,
    processes: int | None = None,
    user_scale: float | None = None,
) -> dict:
    """All runs at one size (on exports of `processes` processes, --processes by
    default; or on the user-shaped export at `user_scale`), with the engines whose
    packages are installed and that run on such exports."""
    if user_scale is None:
        path = generate.export(n, args.seed, processes=processes or args.processes)
    else:
        path = generate.user_export(user_scale, args.seed)
    engines = [e for e in engines if e.runs_on(1 if user_scale else processes or args.processes)]
    if processes == 1 and n >= LARGE:
        # The plain engine is split by the memory budget there: forcing 8 windows
        # would time the same reading twice.
        engines = [e for e in engines if e.name != WINDOW_ENGINE]
    work = generate.CACHE / f"work-{path.stem}"
    record: dict[str, Any] = {"size": n, **_counts(path), "runs": {}, "stages": {}}
    if user_scale is not None:
        record |= {"label": f"user-shaped ×{user_scale:g}", "size": record["kernels"]}
    elif processes == 1 and args.processes != 1:
        record["label"] = "one process"
    record["load_before"] = os.getloadavg()
    warm(path)
    large = n >= LARGE or (user_scale or 0) >= USER_LARGE
    plan, runs = _plan(args, large), dict[str, list[Run]]()
    peer_runs: dict[str, list[peers.PeerRun]] = {}
    for i in range(max(plan.values())):
        for engine in engines:
            if i < plan[engine.family]:
                runs.setdefault(engine.name, []).append(
                    run_child(engine.module, *_child_args(engine, path, work))
                )
        for peer in others if i < plan["nsys-ai"] else []:
            peer_runs.setdefault(peer.name, []).append(
                peers.run_peer(peer, path, args.peers_venv, args.peer_timeout)
            )
        print(f"  {record.get('label', f'{n:,} kernels')}: round {i + 1} done", flush=True)
    for name, done in runs.items():
        record["runs"][name] = {
            "wall_s": summary([r.wall_s for r in done]),
            "peak_rss_gb": summary([r.peak_rss_bytes / 1e9 for r in done]),
            "outputs": [r.output for r in done],
            "read_as": (done[0].output or {}).get("read_as"),
        }
    record["load_after"] = os.getloadavg()
    record["peers"] = {
        name: peers.summarise(done, args.peer_timeout) for name, done in peer_runs.items()
    }
    if "nsysmap" in runs:
        names = runs["nsysmap"][0].output["stages"]
        record["stages"] = {
            s: summary([r.output["stages"][s] for r in runs["nsysmap"]]) for s in names
        }
    if "nsysmap" in runs and "sql" in runs:
        # The whole read's: range ids count in NVTX rowid order only there (parts
        # read apart number their ranges part by part).
        ours = compare.nsysmap_totals(output_dir(work, "nsysmap") / "ops.parquet")
        theirs = compare.sql_totals(work / "sql_totals.parquet", path)
        record["same_totals_per_range"] = compare.same_totals(ours, theirs)
        record["ranges_compared"] = ours.height
    if not args.keep_outputs:
        shutil.rmtree(work, ignore_errors=True)
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="nsysmap attribution benchmark")
    parser.add_argument(
        "--sizes", default="1e5,1e6,1e7", help="kernels per export, comma-separated"
    )
    parser.add_argument("--runs", type=int, default=5, help="runs per engine below 1e7 kernels")
    parser.add_argument("--large-runs", type=int, default=3, help="runs per engine from 1e7")
    parser.add_argument("--sql-runs", type=int, default=3, help="SQL engine runs below 1e7")
    parser.add_argument("--sql-large-runs", type=int, default=1, help="SQL engine runs from 1e7")
    parser.add_argument(
        "--engines", default=",".join(ENGINES), help="subset of " + ",".join(ENGINES)
    )
    parser.add_argument("--peer-runs", type=int, default=3, help="nsys-ai runs below 1e7")
    parser.add_argument("--peer-large-runs", type=int, default=1, help="nsys-ai runs from 1e7")
    parser.add_argument(
        "--peer-timeout", type=float, default=peers.TIMEOUT_S, help="seconds; a result when hit"
    )
    parser.add_argument("--peers-venv", type=Path, default=peers.VENV, help="see `make peers`")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--processes", type=int, default=2, help="processes (one GPU each) in the exports"
    )
    parser.add_argument(
        "--user-shaped",
        default="",
        help="scales of the user-shaped export to run too, comma-separated (1: 2.2 M kernels, "
        "7.1 M runtime calls, 15.9 M NVTX ranges on 5 threads); none by default",
    )
    parser.add_argument(
        "--one-process",
        default="",
        help="sizes of one-process exports to run too (split by time window when over the "
        "memory budget), comma-separated; none by default",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    parser.add_argument("--keep-outputs", action="store_true", help="keep bench/cache/work-*")
    args = parser.parse_args(argv)
    args.engines = set(args.engines.split(","))
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    scales = [float(s) for s in args.user_shaped.split(",") if s]
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    results: dict[str, Any] = {
        "started": started,
        "machine": machine() | {"bytecode_compiled": compile_packages()},
        "argv": vars(args)
        | {"engines": sorted(args.engines), "out": str(args.out)}
        | {"peers_venv": str(args.peers_venv)},
        "sizes": [],
    }
    one_process = [int(float(s)) for s in args.one_process.split(",") if s]
    engines, skipped = available(e for e in ALL_ENGINES if e.family in args.engines)
    others, skipped_peers = peers.available(
        peers.PEERS if "nsys-ai" in args.engines else (), args.peers_venv, kind="nsys"
    )
    for line in skipped + skipped_peers:
        print(line, flush=True)
    results["skipped"] = skipped + skipped_peers
    results["peer_versions"] = peers.versions(args.peers_venv, others)
    for n in sizes:
        print(f"{n:,} kernels ...", flush=True)
        results["sizes"].append(bench_size(args, n, engines, others))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    for n in one_process:
        print(f"{n:,} kernels, one process ...", flush=True)
        results["sizes"].append(bench_size(args, n, engines, processes=1))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    for scale in scales:
        print(f"user-shaped export ×{scale:g} ...", flush=True)
        results["sizes"].append(bench_size(args, 0, engines, others, user_scale=scale))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    table = markdown(results) + peers.side_by_side(results)
    args.out.with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
