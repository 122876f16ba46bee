"""Other tools as optional engines, side by side with nsysmap: nsys-ai and HTA.

They live in their own virtual environment, `.venv-peers` at the repository
root (`make peers`, which `make bench` runs; git-ignored), so that their
pins never change nsysmap's `.venv`. Each runs as a whole process with that
environment's Python, through its public command line or API, timed from
start to exit like every other engine:

* nsys-ai on an Nsight Systems export: `nsys-ai skill run
  nvtx_layer_breakdown EXPORT --format json` (kernels attributed to their
  NVTX regions). Its Parquet cache next to the export is deleted before every
  run, so each run reads the export from scratch as nsysmap does.
* HTA (HolisticTraceAnalysis) on a torch.profiler trace: `TraceAnalysis` on
  a directory holding the trace, then `get_gpu_kernel_breakdown`
  (bench/peer_child.py, run by the peer environment's Python).

A peer whose environment or package is missing is skipped with one line. A
run that passes the time-out is killed and recorded as a result (its wall
time is then "> limit"); a run that fails, or prints nothing, raises.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.report import size_text

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-peers"
CHILD = Path(__file__).resolve().parent / "peer_child.py"
TIMEOUT_S = 600.0
INSTALL_HINT = "make peers"


@dataclass(frozen=True)
class Peer:
    """One peer engine: its name, the file in the environment that shows it is
    installed (relative to the venv; a glob), and what it runs on."""

    name: str
    marker: str
    input_kind: str  # "nsys" (an export) or "torch" (a trace)


NSYS_AI = Peer("nsys-ai", "bin/nsys-ai", "nsys")
HTA = Peer("HTA", "lib/python*/site-packages/hta/trace_analysis.py", "torch")
PEERS = (NSYS_AI, HTA)


@dataclass(frozen=True)
class PeerRun:
    """One run of a peer: wall time and peak RSS, or a time-out."""

    wall_s: float
    peak_rss_bytes: int
    timed_out: bool
    output_bytes: int


def available(
    peers: Sequence[Peer], venv: Path = VENV, kind: str | None = None
) -> tuple[list[Peer], list[str]]:
    """The peers installed in `venv` (of input `kind`), and one line per peer left out."""
    ready, skipped = [], []
    for peer in peers:
        if kind is not None and peer.input_kind != kind:
            continue
        if not (venv / "bin" / "python").exists():
            skipped.append(
                f"skipping {peer.name}: the peer environment {venv} is absent ({INSTALL_HINT})"
            )
        elif not any(venv.glob(peer.marker)):
            skipped.append(f"skipping {peer.name}: it is not installed in {venv} ({INSTALL_HINT})")
        else:
            ready.append(peer)
    return ready, skipped


def nsys_ai_cache(export: Path) -> list[Path]:
    """The cache nsys-ai writes next to an export (a folder and a lock file)."""
    base = export.with_suffix(".nsys-cache")
    return [base, base.with_name(base.name + ".build.lock")]


def clear_nsys_ai_cache(export: Path) -> None:
    for path in nsys_ai_cache(export):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink()


def command(peer: Peer, target: Path, venv: Path = VENV) -> list[str]:
    """The command line of one run of `peer` on `target` (an export, or a trace folder)."""
    if peer.name == NSYS_AI.name:
        skill = ["skill", "run", "nvtx_layer_breakdown", str(target), "--format", "json"]
        return [str(venv / "bin" / "nsys-ai"), *skill]
    if peer.name == HTA.name:
        return [str(venv / "bin" / "python"), str(CHILD), "hta", str(target)]
    raise ValueError(f"unknown peer {peer.name}")


def run_timed(argv: Sequence[str], timeout_s: float = TIMEOUT_S) -> PeerRun:
    """Run `argv` as its own process group; wall time to exit, peak RSS, time-out.

    Raises when it fails or prints nothing on stdout.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, start_new_session=True)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            wall = time.perf_counter() - start
            if pid:
                break
            if wall > timeout_s:
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = -signal.SIGKILL
                return PeerRun(timeout_s, usage.ru_maxrss * 1024, True, 0)
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        size = out.seek(0, os.SEEK_END)
        if proc.returncode != 0 or size == 0:
            err.seek(0)
            why = f"exit status {proc.returncode}" if proc.returncode else "no output"
            raise RuntimeError(f"{' '.join(argv)} failed ({why}):\n{err.read()[-2000:]}")
    return PeerRun(wall, usage.ru_maxrss * 1024, False, size)


def run_peer(peer: Peer, target: Path, venv: Path = VENV, timeout_s: float = TIMEOUT_S) -> PeerRun:
    """One run of `peer`; nsys-ai's cache is cleared before and after."""
    if peer.name == NSYS_AI.name:
        clear_nsys_ai_cache(target)
    try:
        return run_timed(command(peer, target, venv), timeout_s)
    finally:
        if peer.name == NSYS_AI.name:
            clear_nsys_ai_cache(target)


def trace_folder(trace: Path, work: Path) -> Path:
    """A folder holding only `trace` (HTA reads every trace in a folder)."""
    folder = work / f"hta-{trace.stem}"
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / trace.name
    if not link.exists():
        link.symlink_to(trace.resolve())
    return folder


def summarise(runs: list[PeerRun], timeout_s: float) -> dict:
    """Median and spread of wall time and peak RSS; a time-out counts as the limit."""
    walls = [r.wall_s for r in runs]
    rss = [r.peak_rss_bytes / 1e9 for r in runs]
    return {
        "wall_s": {"median": statistics.median(walls), "min": min(walls), "max": max(walls)},
        "peak_rss_gb": {"median": statistics.median(rss), "min": min(rss), "max": max(rss)},
        "n": len(runs),
        "timed_out": sum(r.timed_out for r in runs),
        "limit_s": timeout_s,
        "output_bytes": [r.output_bytes for r in runs],
    }


def _runs(result: dict) -> int:
    """Runs in a peer's summary, or in one of the benchmark's own (count in wall_s)."""
    return int(result.get("n", result["wall_s"].get("n", 1)))


def _median_timed_out(result: dict) -> bool:
    return 2 * result.get("timed_out", 0) > _runs(result)


def wall_text(result: dict) -> tuple[str, str]:
    """The median and spread as the tables show them ("> 600" when most runs timed out)."""
    wall = result["wall_s"]
    spread = f"{wall['min']:.2f}..{wall['max']:.2f}"
    if result.get("timed_out"):
        spread = f"{result['timed_out']} of {_runs(result)} timed out"
    if _median_timed_out(result):
        return f"> {result['limit_s']:.0f}", spread
    return f"{wall['median']:.2f}", spread


def ratio_text(result: dict, ours_s: float | None) -> str:
    """The peer's median wall time over nsysmap's (a lower bound after a time-out)."""
    if not ours_s:
        return "-"
    ratio = result["wall_s"]["median"] / ours_s
    return f"> {ratio:.1f}" if _median_timed_out(result) else f"{ratio:.1f}"


DISTRIBUTIONS = {NSYS_AI.name: "nsys_ai", HTA.name: "holistictraceanalysis"}


def versions(venv: Path, peers: Sequence[Peer]) -> dict[str, str]:
    """The installed version of each peer (and DuckDB's for nsys-ai), from `venv`'s metadata."""
    found = {}
    wanted = [(p.name, DISTRIBUTIONS[p.name]) for p in peers]
    if NSYS_AI in peers:
        wanted.append(("duckdb", "duckdb"))  # what nsys-ai reads exports with
    for name, dist in wanted:
        infos = sorted(venv.glob("lib/python*/site-packages/*.dist-info"))
        for info in infos:
            stem, _, version = info.name.removesuffix(".dist-info").rpartition("-")
            if stem.lower() == dist:
                found[name] = version
    return found


def _load(size: dict) -> str:
    before, after = size.get("load_before"), size.get("load_after")
    if not before or not after:
        return "-"
    return f"{before[0]:.1f} -> {after[0]:.1f}"


def side_by_side(results: dict) -> str:
    """nsysmap beside the peers on the same exports: median, spread, memory, ratio."""
    sizes = [s for s in results["sizes"] if s.get("peers")]
    if not sizes:
        names = {p.name for p in PEERS}
        why = [s for s in results.get("skipped", []) if s.split(":")[0].split()[-1] in names]
        return "".join(f"\nSide by side: not run ({line})\n" for line in why)
    lines = [
        "",
        "Side by side ("
        + ", ".join(f"{k} {v}" for k, v in results["peer_versions"].items())
        + "); × nsysmap is the ratio of median wall times; load is the 1-minute load "
        "average before -> after the size's runs:",
        "",
        "| kernels | engine | runs | wall, median (s) | spread | peak RSS (GB) | × nsysmap "
        "| load |",
        "|---:|---|---:|---:|---|---:|---:|---|",
    ]
    for size in sizes:
        ours = size["runs"].get("nsysmap")
        ours_s = ours["wall_s"]["median"] if ours else None
        rows = [("nsysmap", ours, "1.0")] if ours else []
        rows += [(name, r, ratio_text(r, ours_s)) for name, r in size["peers"].items()]
        for name, r, ratio in rows:
            median, spread = wall_text(r)
            lines.append(
                f"| {size_text(size)} | {name} | {_runs(r)} | {median} | {spread} "
                f"| {r['peak_rss_gb']['median']:.2f} | {ratio} | {_load(size)} |"
            )
    return "\n".join(lines) + "\n"
