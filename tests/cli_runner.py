"""`nsysmap ARGV` in-process through click's test runner, as the console script runs it."""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Sequence

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
