"""Ctrl-C answered in one line, wherever it lands (docs/cli.md, "Ctrl-C").

The console script (nsysmap.console) runs the command under `answered`,
which installs `on_sigint` as SIGINT's handler before anything heavy is
imported (`python -m nsysmap.cli` runs it the same way, once the commands
are imported), and answers a Ctrl-C that comes while the interpreter ends.
While it is armed, a Ctrl-C raises KeyboardInterrupt, once: the handler
disarms itself as it raises, so that a second Ctrl-C while the first is
answered (the line printed, a staging folder settled, the interpreter's
exit) is noted instead of raising in the middle of the answer. Code that
takes a Ctrl-C and carries on (`nsysmap run` forwarding it to the script)
arms it again (`rearm`) and learns whether another came meanwhile. Without
`answered` (the library, click's test runner), Python's own handler stays,
and these calls change nothing. Standard library only: imported before
anything else.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn

INTERRUPTED = 130
_state = {"installed": False, "armed": False, "noted": 0}
_completed: list[str] = []  # the folders this command has put complete outputs into
_answered: list[bool] = []  # the one line has been said


def answered(command: Callable[[], int]) -> NoReturn:
    """Run `command` (which returns an exit code) with Ctrl-C answered in one line and
    exit 130 wherever it lands, from here to the interpreter's end, and exit with its
    code. A command that returns 130 has said the line itself."""
    install()
    atexit.register(_last_exit_handler)  # registered first: run last
    code = INTERRUPTED
    try:
        code = command()
        if code == INTERRUPTED:
            _answered.append(True)
        disarm()
    except KeyboardInterrupt:  # raised once at most: later ones are only noted
        disarm()
        if not _answered:
            _say(interrupted_line())
        code = INTERRUPTED
    sys.exit(code)


def _last_exit_handler() -> None:
    """The last thing before the interpreter ends: a Ctrl-C noted meanwhile is answered
    here; later ones are ignored (nothing is left to interrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if noted() and not _answered:
        _say(interrupted_line())
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


def install() -> bool:
    """Take SIGINT (unless it is ignored, as in a background job); True when taken."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return False
    signal.signal(signal.SIGINT, on_sigint)
    _state.update(installed=True, armed=True, noted=0)
    return True


def on_sigint(_signum: int, _frame: FrameType | None) -> None:
    """Raise KeyboardInterrupt when armed (and disarm), else note the Ctrl-C."""
    if _state["armed"]:
        _state["armed"] = False
        raise KeyboardInterrupt
    _state["noted"] += 1


def rearm() -> bool:
    """Arm again after a Ctrl-C was taken; True when another came meanwhile."""
    came = _state["noted"] > 0
    _state["noted"] = 0
    if _state["installed"]:
        _state["armed"] = True
    return came


def disarm() -> None:
    """From now on a Ctrl-C is only noted (the command is done: the exit is under way)."""
    _state["armed"] = False


def noted() -> bool:
    """Did a Ctrl-C come while disarmed?"""
    return _state["noted"] > 0


@contextmanager
def deferred() -> Iterator[None]:
    """A Ctrl-C inside the block is taken once the block is done (main thread only):
    what must not stop halfway (the swap of an output folder) does not."""
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGINT) is None:  # None: a handler not from Python
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught and callable(previous):
        previous(signal.SIGINT, None)


def completed(folder: object) -> None:
    """Note that complete outputs are in `folder` (said when a Ctrl-C comes after)."""
    _completed.append(str(folder))


def forget_completed() -> None:
    """A new command starts: nothing it wrote is complete yet."""
    _completed.clear()


def interrupted_line() -> str:
    """The one line a Ctrl-C gets, saying which outputs were complete by then."""
    if not _completed:
        return "nsysmap: interrupted"
    return f"nsysmap: interrupted; the outputs in {_completed[-1]} are complete"
