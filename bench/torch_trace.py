"""torch.profiler traces at scale: `nsysmap attribute` against only parsing the JSON.

    python -m bench.torch_trace                       # 22 tiles of the DDP trace, 3 runs
    python -m bench.torch_trace --tiles 4 --runs 5    # smaller

A real trace from the corpus (default: the HTA DDP trace, rank 0: 6,095 GPU
operations, 15 MB of JSON) is tiled N times into one plain-JSON trace in
bench/cache/ (gitignored): each copy's times are shifted past the previous
copy's end (exact decimal arithmetic, the text keeps its decimals), and its
correlation ids, external ids, flow ids and sequence numbers are offset so
that no copy links to another. Generating is not measured.

Each engine then runs in its own process, runs interleaved, after one read of
the file to put it in the page cache:

| engine | what it does |
| --- | --- |
| parse (json) | read the file and `json.loads` it (standard library) |
| parse (json, collector off) | the same, the cyclic collector off (the floor without orjson) |
| parse (orjson) | read the file and `orjson.loads` it (skipped when orjson is missing) |
| parse (orjson, collector off) | the same, Python's cyclic collector off (as nsysmap reads) |
| nsysmap | `analyse_file`, what `nsysmap attribute` runs, with its stage timings |
| HTA | HolisticTraceAnalysis: parse, then GPU kernel breakdown (.venv-peers; bench/peers.py) |

The floor is the faster parse. Prints a Markdown table and writes
bench/results/torch-latest.json. Not a test.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import re
import shutil
import statistics
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench import peers
from bench.engines import Engine, available
from bench.measure import compile_packages, machine, run_child, warm

ROOT = Path(__file__).parent
CACHE = ROOT / "cache"
RESULTS = ROOT / "results"
CORPUS = ROOT.parent.parent / "shared" / "corpus" / "real"
DEFAULT_TRACE = "hta_ddp_ns_resolution_rank0_v100.json.gz"
VERSION = 1  # bump when the tiling changes
ARG_IDS = ("correlation", "External id", "external id", "Sequence number")
_MARK = re.compile(r'"\\u0000([-0-9.eE+]+)\\u0000"')

ENGINES = (
    Engine("parse (json)", "parse", "bench.torch_trace", ("--parse", "json")),
    Engine(
        "parse (json, collector off)",
        "parse",
        "bench.torch_trace",
        ("--parse", "json", "--no-gc"),
    ),
    Engine("parse (orjson)", "parse", "bench.torch_trace", ("--parse", "orjson"), ("orjson",)),
    Engine(
        "parse (orjson, collector off)",
        "parse",
        "bench.torch_trace",
        ("--parse", "orjson", "--no-gc"),
        ("orjson",),
    ),
    Engine("nsysmap", "nsysmap", "bench.nsysmap_run"),
)


def _number(text: str) -> Decimal:
    return Decimal(text)


def _encode(value: Any) -> Any:
    """Decimals as marked text, replaced by the bare number after dumping."""
    if isinstance(value, Decimal):
        return f"\x00{value}\x00"
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return value


def _dumps(value: Any) -> str:
    return _MARK.sub(r"\1", json.dumps(_encode(value)))


def tiled(source: Path, tiles: int) -> Path:
    """`source` tiled `tiles` times (cached)."""
    out = CACHE / f"torch-{source.name.split('.')[0]}-x{tiles}-v{VERSION}.json"
    if out.exists():
        return out
    raw = source.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw, parse_float=_number, parse_int=Decimal)
    events = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), Decimal) and e.get("ph") == "X"]
    first = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - first
    step = (span + 1000).to_integral_value()  # 1 ms between copies
    top = 0  # one offset for every id, so that flows and correlations still agree
    for e in events:
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        for value in (e.get("id"), *(args.get(k) for k in ARG_IDS)):
            if isinstance(value, Decimal):
                top = max(top, int(value))
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with tmp.open("w") as fh:
        header = _dumps({k: v for k, v in doc.items()})
        fh.write(header[:-1] + (", " if doc else "") + '"traceEvents": [\n')
        sep = ""
        for i in range(tiles):
            for e in events:
                if e.get("ph") == "M" and i:
                    continue  # thread names once
                copy = dict(e)
                if isinstance(copy.get("ts"), Decimal):
                    copy["ts"] = copy["ts"] + i * step
                if isinstance(copy.get("id"), Decimal):
                    copy["id"] = copy["id"] + i * (top + 1)
                if isinstance(copy.get("args"), dict):
                    args = dict(copy["args"])
                    for k in ARG_IDS:
                        if isinstance(args.get(k), Decimal):
                            args[k] = args[k] + i * (top + 1)
                    copy["args"] = args
                fh.write(sep + _dumps(copy))
                sep = ",\n"
        fh.write("\n]}\n")
    tmp.rename(out)
    return out


def parse_only(path: Path, parser: str, collector: bool = True) -> None:
    """The floor: read the file and parse it, nothing else; prints one JSON line."""
    if not collector:
        gc.disable()
    start = time.perf_counter()
    raw = path.read_bytes()
    if parser == "orjson":
        import orjson

        doc = orjson.loads(raw)
    else:
        doc = json.loads(raw)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "events": len(doc["traceEvents"])}))


def _gpu_ops(path: Path) -> int:
    doc = json.loads(path.read_bytes())
    cats = ("kernel", "gpu_memcpy", "gpu_memset")
    return sum(1 for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in cats)


def _median(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trace", type=Path, default=CORPUS / DEFAULT_TRACE)
    parser.add_argument("--tiles", type=int, default=22)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "torch-latest.json")
    parser.add_argument("--peer-timeout", type=float, default=peers.TIMEOUT_S, help="seconds")
    parser.add_argument("--peers-venv", type=Path, default=peers.VENV, help="see `make peers`")
    parser.add_argument("--no-peers", action="store_true", help="leave HTA out")
    parser.add_argument("--parse", choices=("json", "orjson"), help=argparse.SUPPRESS)
    parser.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--no-gc", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.parse:  # a child run of one parse engine
        parse_only(args.file, args.parse, collector=not args.no_gc)
        return
    path = tiled(args.trace, args.tiles)
    n_ops = _gpu_ops(path)
    engines, skipped = available(ENGINES)
    others, skipped_peers = peers.available(
        () if args.no_peers else peers.PEERS, args.peers_venv, kind="torch"
    )
    skipped += skipped_peers
    for line in skipped:
        print(line, flush=True)
    load_before = os.getloadavg()
    warm(path)
    compiled = compile_packages()
    work = CACHE / "work-torch"
    runs: dict[str, list] = {}
    peer_runs: dict[str, list[peers.PeerRun]] = {}
    for i in range(args.runs):
        for engine in engines:
            if engine.family == "parse":
                cmd = (*engine.args, "--file", str(path))
            else:
                cmd = (str(path), str(work))
            runs.setdefault(engine.name, []).append(run_child(engine.module, *cmd))
        for peer in others:
            folder = peers.trace_folder(path, CACHE)
            peer_runs.setdefault(peer.name, []).append(
                peers.run_peer(peer, folder, args.peers_venv, args.peer_timeout)
            )
        print(f"  round {i + 1} done", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    record = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": machine() | {"orjson": _orjson_version(), "bytecode_compiled": compiled},
        "trace": args.trace.name,
        "tiles": args.tiles,
        "file_bytes": path.stat().st_size,
        "gpu_ops": n_ops,
        "skipped": skipped,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "peer_versions": peers.versions(args.peers_venv, others),
        "peers": {
            name: peers.summarise(done, args.peer_timeout) for name, done in peer_runs.items()
        },
        "runs": {
            name: {
                "wall_s": _median([r.wall_s for r in done]),
                "inner_s": _median([r.output["seconds"] for r in done]),
                "peak_rss_gb": _median([r.peak_rss_bytes / 1e9 for r in done]),
                "stages": {
                    s: _median([r.output["stages"][s] for r in done])
                    for s in done[0].output.get("stages", {})
                },
                "n": len(done),
            }
            for name, done in runs.items()
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    table = markdown(record) + peers.side_by_side(
        {"sizes": [record | {"kernels": n_ops}], "peer_versions": record["peer_versions"]}
    )
    args.out.with_suffix(".md").write_text(table)
    print(table)


def _orjson_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("orjson")
    except metadata.PackageNotFoundError:
        return "not installed"


def markdown(record: dict) -> str:
    """One row per engine: wall time, time inside the process, memory, µs per GPU op, × floor."""
    floors = [r["inner_s"]["median"] for e, r in record["runs"].items() if e.startswith("parse")]
    floor = min(floors) if floors else None
    n = record["gpu_ops"]
    lines = [
        f"{record['trace']} tiled {record['tiles']} times: {record['file_bytes'] / 1e6:.0f} MB, "
        f"{n:,} GPU operations. Started {record['started']}.",
        "",
        "| engine | runs | wall, median (s) | spread | in-process, median (s) | peak RSS (GB) "
        "| µs per GPU op | × floor |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for engine, r in record["runs"].items():
        inner = r["inner_s"]["median"]
        ratio = f"{inner / floor:.2f}" if floor else "-"
        lines.append(
            f"| {engine} | {r['n']} | {r['wall_s']['median']:.2f} "
            f"| {r['wall_s']['min']:.2f}..{r['wall_s']['max']:.2f} | {inner:.2f} "
            f"| {r['peak_rss_gb']['median']:.2f} | {1e6 * inner / n:.1f} | {ratio} |"
        )
    stages = record["runs"].get("nsysmap", {}).get("stages", {})
    if stages:
        lines += [
            "",
            "nsysmap stages, median seconds: "
            + ", ".join(f"{s} {v['median']:.2f}" for s, v in stages.items()),
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
