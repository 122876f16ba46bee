"""Running one engine in a child process: wall time, peak RSS and its JSON output."""

from __future__ import annotations

import compileall
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path


@dataclass(frozen=True)
class Run:
    """One run of one engine."""

    wall_s: float  # from start of the child process to its exit
    peak_rss_bytes: int  # the child's maximum resident set size
    output: dict  # the JSON line the child printed


def run_child(module: str, *args: str) -> Run:
    """Run `python -m module args...`; raise with its stderr when it fails."""
    with tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args], stdout=subprocess.PIPE, stderr=err, text=True
        )
        assert proc.stdout is not None  # stdout=PIPE
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdout.close()
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{module} {' '.join(args)} failed:\n{err.read()[-2000:]}")
    return Run(wall, usage.ru_maxrss * 1024, json.loads(out.strip().splitlines()[-1]))


def summary(values: list[float]) -> dict[str, float]:
    """Median, min, max and count."""
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def warm(path: Path) -> None:
    """Read the file once so that every engine finds it in the page cache."""
    with path.open("rb") as fh:
        while fh.read(1 << 24):
            pass


# The packages the engines import from this checkout (site-packages are compiled by pip).
PACKAGES = ("nsysmap", "instrument")
ROOT = Path(__file__).resolve().parent.parent


def compile_packages(root: Path = ROOT) -> bool:
    """Compile nsysmap's own packages (under `root`) to bytecode, as an installed
    package is, so that no timed run compiles them again (True when every module
    compiled).

    Python loads a module's bytecode from __pycache__ when it is newer than the
    source and writes it there after compiling one, unless PYTHONDONTWRITEBYTECODE
    is set, as it is on the benchmark machine: every process would then compile
    the package's 200-odd modules from source (0.28 s of each run).
    """
    return all(compileall.compile_dir(root / name, quiet=1, legacy=False) for name in PACKAGES)


def machine() -> dict[str, object]:
    """What the benchmark ran on."""
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    import sqlite3

    packages = ("polars", "pyarrow", "adbc-driver-sqlite", "connectorx")
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(mem_kb / 1024**2, 1),
        "python": platform.python_version(),
        "sqlite (stdlib)": sqlite3.sqlite_version,
        **{name: _version(name) for name in packages},
    }


def _version(package: str) -> str:
    """The installed version of `package`, or "not installed"."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"
