"""`nsysmap ARGV` in a child process under an address-space cap, with its peak memory.

The cap is `RLIMIT_AS` set in the child before it starts (as `ulimit -v` does in a
shell), so an allocation past it fails in the child alone; its peak resident
memory comes from `wait4`, the child's own, not the test process's.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
from dataclasses import dataclass

# `ulimit -v 8000000`: the cap the oversized-input tests run under (KiB, as ulimit counts).
CAP_KIB = 8_000_000


@dataclass(frozen=True)
class Outcome:
    code: int  # the exit status, or 128 + the signal that ended the child
    stdout: str
    stderr: str
    peak_rss_mb: float  # the child's peak resident memory
    signal: int | None  # the signal that ended it, if one did


def run_capped(argv: list[str], cap_kib: int = CAP_KIB, timeout: float = 600) -> Outcome:
    """Run `nsysmap ARGV` with its address space capped at `cap_kib` KiB."""
    limit = cap_kib * 1024

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    cmd = [sys.executable, "-m", "nsysmap", *argv]  # the console script, as users run it
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, preexec_fn=cap)
        _, status, usage = _wait4(proc.pid, timeout)
        signal = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        code = 128 + signal if signal is not None else os.WEXITSTATUS(status)
        proc.returncode = code  # reaped by wait4: Popen must not wait for it again
        out.seek(0)
        err.seek(0)
        return Outcome(
            code,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            usage.ru_maxrss / 1024,
            signal,
        )


def _wait4(pid: int, timeout: float) -> tuple[int, int, resource.struct_rusage]:
    """wait4 on `pid`, killing it (by its id) when it runs past `timeout` seconds."""
    import signal
    import threading

    timer = threading.Timer(timeout, lambda: os.kill(pid, signal.SIGKILL))
    timer.start()
    try:
        return os.wait4(pid, 0)
    finally:
        timer.cancel()


def one_line_error(outcome: Outcome) -> str:
    """The one line a failed run printed on stderr (asserts there is exactly one)."""
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1, outcome.stderr[-2000:]
    assert lines[0].startswith("nsysmap: error: "), lines[0]
    return lines[0]
