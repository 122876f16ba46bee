"""Run `nsysmap ARGV` (its console script) with a fault at one file-system step.

    python tests/fault_points.py ROOT STEP SIGNAL LOG [DELAY_S] -- ARGV...

Every file-system call nsysmap makes through Python on a path under ROOT
(os.mkdir, os.open, os.link, os.rename, os.replace, os.unlink, os.rmdir,
os.chmod, shutil.rmtree, and the renameat2 calls of nsysmap.output.swap:
the swap and the no-replace moves) is a step, counted from 0 and appended
to LOG as `N name path`. FAULT_NO_EXCHANGE=1 in the environment makes the
swap take its other way, two renames, as where the system has no
RENAME_EXCHANGE. FAULT_IMPORT=MODULE sends SIGNAL when MODULE is first
imported (start-up), FAULT_AT_EXIT=1 from an exit handler that runs while
the interpreter ends (teardown); FAULT_RUN_MODULE=MODULE runs `python -m
MODULE ARGV` instead of the console script. Before step STEP runs, the process sends itself
SIGNAL (KILL or INT); STEP -1 counts without a fault. DELAY_S (default 0)
is slept before every step, to widen the moments between them for a
reader or a kill from outside. A SIGINT lands as a Ctrl-C would: the
handler runs before the step, which then does not happen. The tests of
tests/test_output_swap.py and tests/test_interrupts.py use it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

_CALLS = ("mkdir", "open", "link", "rename", "replace", "unlink", "rmdir", "chmod")


def main() -> None:
    root, step, sig, log, *rest = sys.argv[1 : sys.argv.index("--")]
    argv = sys.argv[sys.argv.index("--") + 1 :]
    counter = _Counter(os.path.realpath(root), int(step), sig, log, float(rest[0] if rest else 0))
    for name in _CALLS:
        setattr(os, name, counter.wrap(name, getattr(os, name)))
    shutil.rmtree = counter.wrap("rmtree", shutil.rmtree)  # type: ignore[assignment]
    from nsysmap.output import placement, swap

    swap._renameat2 = counter.wrap("renameat2", swap._renameat2)  # type: ignore[method-assign]
    if os.environ.get("FAULT_NO_EXCHANGE") == "1":  # as where there is no RENAME_EXCHANGE
        placement.exchange = lambda a, b: False  # type: ignore[assignment]
    if os.environ.get("FAULT_IMPORT"):
        sys.meta_path.insert(0, _SignalOnImport(os.environ["FAULT_IMPORT"], counter.signal))
    sys.argv = ["nsysmap", *argv]
    if os.environ.get("FAULT_RUN_MODULE"):  # `python -m MODULE ARGV` instead
        import runpy

        runpy.run_module(os.environ["FAULT_RUN_MODULE"], run_name="__main__", alter_sys=True)
        return
    from nsysmap.console import main as console

    console()


class _SignalOnImport:
    """A finder that finds nothing, but sends a signal when `module` is first imported."""

    def __init__(self, module: str, sig: signal.Signals) -> None:
        self.module, self.signal = module, sig

    def find_spec(self, name: str, *_: object) -> None:
        if name == self.module:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), self.signal)


class _Counter:
    def __init__(self, root: str, step: int, sig: str, log: str, delay: float) -> None:
        self.root, self.step, self.log, self.delay = root, step, log, delay
        self.signal = signal.SIGKILL if sig == "KILL" else signal.SIGINT
        self.count = 0

    def wrap(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            path = next((str(a) for a in args if isinstance(a, str | os.PathLike)), "")
            if path and os.path.realpath(path).startswith(self.root):
                self._before(name, path)
            return call(*args, **kwargs)

        return counted

    def _before(self, name: str, path: str) -> None:
        n, self.count = self.count, self.count + 1
        if n == 0 and os.environ.get("FAULT_AT_EXIT") == "1":
            atexit.register(self._at_exit)  # after the console script's own: run before it
        with open(self.log, "a") as fh:
            fh.write(f"{n} {name} {path}\n")
        if self.delay:
            time.sleep(self.delay)
        if n == self.step:
            os.kill(os.getpid(), self.signal)

    def _at_exit(self) -> None:
        os.kill(os.getpid(), self.signal)
        time.sleep(0.2)  # the handler runs meanwhile


if __name__ == "__main__":
    main()
