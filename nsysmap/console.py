"""The `nsysmap` console script: the CLI with Ctrl-C taken from its first line.

The console script starts here rather than in nsysmap.cli, whose imports
(Polars, PyArrow, click, every command) take a while: this module imports
only the standard library and nsysmap.core.interrupts, and takes SIGINT before
importing the CLI. Wherever a Ctrl-C lands, nsysmap prints one line and
exits with 130:

    imports, the command   KeyboardInterrupt: `nsysmap: interrupted` (nsysmap.cli
                           adds "the outputs in DIR are complete" once a commit
                           put them in place)
    the command's end      the same, with the outputs it wrote named complete
    exit (teardown)        noted, then answered by the last exit handler, which
                           first makes SIGINT ignored: from then on the process
                           only exits, with its code

Only the interpreter's own start-up, before this module runs (a few tens of
milliseconds), is left to Python.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from collections.abc import Sequence

from nsysmap.core import interrupts

INTERRUPTED = 130
_answered: list[bool] = []


def main(argv: Sequence[str] | None = None) -> None:
    """Run `nsysmap ARGV` (sys.argv by default) and exit with its code."""
    interrupts.install()
    atexit.register(_last_exit_handler)  # registered first: run last
    code = INTERRUPTED
    try:
        code = _command(argv)
        interrupts.disarm()
    except KeyboardInterrupt:  # raised once at most: later ones are only noted
        interrupts.disarm()
        if not _answered:
            _say(interrupts.interrupted_line())
        code = INTERRUPTED
    sys.exit(code)


def _command(argv: Sequence[str] | None) -> int:
    from nsysmap.cli import exit_code_of

    code = exit_code_of(list(argv) if argv is not None else None)
    if code == INTERRUPTED:
        _answered.append(True)  # the CLI has said so
    return code


def _last_exit_handler() -> None:
    """The last thing before the interpreter ends: a Ctrl-C noted meanwhile is answered
    here; later ones are ignored (nothing is left to interrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if interrupts.noted() and not _answered:
        _say(interrupts.interrupted_line())
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(INTERRUPTED)


def _say(line: str) -> None:
    _answered.append(True)
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
