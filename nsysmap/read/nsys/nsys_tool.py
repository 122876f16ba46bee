"""Running Nsight Systems: finding `nsys`, and its profile and export command lines.

Commands are always argument lists handed to the OS, never shell strings, so
paths and user arguments with spaces, quotes, `;` or `$()` pass through
untouched. Option spellings follow the Nsight Systems CLI documentation
(long options take `=`):

    nsys profile --trace=cuda,nvtx,osrt,cublas,cudnn --sample=none --cpuctxsw=none
                 --capture-range=cudaProfilerApi --capture-range-end=stop
                 --output=DIR/report --force-overwrite=true  PROGRAM [ARGS...]
    nsys export  --type=sqlite --output=OUT.sqlite --force-overwrite=true  REPORT.nsys-rep
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from nsysmap.core.errors import InputNotFound, ProfilerFailed, ToolMissing

NSYS_ENV = "NSYS"  # explicit path to the nsys executable
TRACE_APIS = ("cuda", "nvtx", "osrt", "cublas", "cudnn")
# Report suffixes: .nsys-rep since 2021.4, .qdrep before.
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")


def find_nsys(env: Mapping[str, str] | None = None) -> Path | None:
    """The nsys executable: $NSYS when set, else the first `nsys` on PATH, else None.

    A set $NSYS that is not an executable file is an error, not a fallback.
    """
    env = os.environ if env is None else env
    explicit = env.get(NSYS_ENV)
    if explicit:
        path = Path(explicit)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ToolMissing(f"{NSYS_ENV}={explicit} is not an executable file")
        return path
    found = shutil.which("nsys", path=env.get("PATH"))
    return Path(found) if found else None


def require_nsys(
    env: Mapping[str, str] | None = None, *, instead: str = "use --backend torch"
) -> Path:
    """Like `find_nsys`, but a missing nsys raises ToolMissing saying what to do instead."""
    nsys = find_nsys(env)
    if nsys is None:
        raise ToolMissing(
            "nsys (Nsight Systems) is not on PATH; install it, set NSYS=/path/to/nsys, "
            f"or {instead}"
        )
    return nsys


def profile_command(
    nsys: Path, report_base: Path, program: Sequence[str], *, capture_range: bool = True
) -> list[str]:
    """`nsys profile ... PROGRAM`, writing `report_base` + `.nsys-rep`.

    With `capture_range`, collection starts at the program's first
    cudaProfilerStart() and stops at its cudaProfilerStop(); the program
    keeps running after the stop.
    """
    cmd = [
        str(nsys),
        "profile",
        f"--trace={','.join(TRACE_APIS)}",
        "--sample=none",  # no CPU sampling or context switches: nsysmap reads neither
        "--cpuctxsw=none",
    ]
    if capture_range:
        cmd += ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    return [*cmd, f"--output={report_base}", "--force-overwrite=true", *program]


def report_file(report_base: Path) -> Path | None:
    """The report nsys wrote for `report_base`, if any."""
    for suffix in REPORT_SUFFIXES:
        candidate = report_base.with_name(report_base.name + suffix)
        if candidate.is_file():
            return candidate
    return None


def export_command(nsys: Path, report: Path, out: Path) -> list[str]:
    """`nsys export` of `report` to the SQLite file `out`."""
    return [
        str(nsys),
        "export",
        "--type=sqlite",
        f"--output={out}",
        "--force-overwrite=true",
        str(report),
    ]


def export_sqlite(report: str | Path, out: str | Path | None = None) -> Path:
    """Export an .nsys-rep report to SQLite with nsys; returns the SQLite path.

    `out` defaults to the report's path with a .sqlite suffix. Raises
    ToolMissing without nsys, ProfilerFailed (with nsys's last stderr line)
    when the export fails.
    """
    report = Path(report)
    if not report.is_file():
        raise InputNotFound(f"{report}: no such file")
    out = report.with_suffix(".sqlite") if out is None else Path(out)
    nsys = require_nsys(
        instead="export the report to SQLite where nsys is installed "
        "(nsys export --type sqlite REPORT.nsys-rep) and pass the .sqlite file"
    )
    cmd = export_command(nsys, report, out)
    done = subprocess.run(cmd, capture_output=True, text=True, errors="replace", check=False)
    if done.returncode != 0 or not out.is_file():
        why = last_line(done.stderr) or last_line(done.stdout) or f"status {done.returncode}"
        raise ProfilerFailed(f"nsys export of {report} failed: {why}")
    return out


def nsys_version(nsys: Path) -> str | None:
    """What `nsys --version` prints (one line), or None when it cannot say."""
    try:
        done = subprocess.run(
            [str(nsys), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return last_line(done.stdout) if done.returncode == 0 else None


def last_line(text: str | None) -> str:
    """The last non-blank line of `text`, stripped ("" when there is none)."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""
