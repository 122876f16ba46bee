"""`nsysmap ARGV` in-process through click's test runner, as the console script runs it."""

from __future__ import annotations

import contextlib
import io
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from nsysmap.cli import cli


def nsysmap_cli(argv: Sequence[object]) -> int:
    """The exit code of `nsysmap ARGV`; its stdout and stderr are passed on (capsys sees them)."""
    result = CliRunner().invoke(cli, [str(a) for a in argv], prog_name="nsysmap")
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # NSYSMAP_DEBUG=1: the bug's traceback, as the script shows it
    return result.exit_code


def invoke(argv: Sequence[object]) -> tuple[int, str, str]:
    """Run the CLI in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = nsysmap_cli(argv)
    return code, out.getvalue(), err.getvalue()


def interrupt_when_ready(
    command: Sequence[str], ready: Path, timeout: float, **popen: Any
) -> tuple[int, str]:
    """Run `command`; once the file `ready` exists, send it SIGINT as a terminal's Ctrl-C
    would, and wait: (exit code, stderr)."""
    # SIGINT as an interactive shell leaves it (a background job inherits it ignored).
    proc = subprocess.Popen(
        list(command),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        **popen,
    )
    try:
        deadline = time.monotonic() + timeout
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready.exists(), f"{ready} never appeared"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err
