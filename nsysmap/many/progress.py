"""Progress across reports, on a terminal only.

One line on stderr, redrawn every TICK_S while reports are attributed::

    nsysmap: 5/16 reports done, 1 failed; slowest running: rank07.sqlite 12 s

Written to a pipe, a file or a CI log it prints nothing (nsysmap.core.timings
decides what a terminal is). What is running, and since when, the caller
reports through `running` (a callable returning report name -> seconds).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TextIO

from nsysmap.core.inert import terminal_text
from nsysmap.core.timings import is_terminal

TICK_S = 0.5


def progress_line(done: int, failed: int, total: int, running: dict[str, float]) -> str:
    """The progress text for `done` of `total` reports, `failed` of them failed."""
    text = f"nsysmap: {done}/{total} reports done"
    if failed:
        text += f", {failed} failed"
    if running:
        name, seconds = max(running.items(), key=lambda item: (item[1], item[0]))
        text += f"; slowest running: {terminal_text(name)} {seconds:.0f} s"
    return text


class Progress:
    """Counts finished reports; on a terminal, keeps the progress line up to date."""

    def __init__(
        self,
        total: int,
        running: Callable[[], dict[str, float]],
        *,
        stream: TextIO | None = None,
        enabled: bool | None = None,
    ) -> None:
        self.total, self.done, self.failed = total, 0, 0
        self._running = running
        self._stream = stream if stream is not None else sys.stderr
        self._enabled = is_terminal(self._stream) if enabled is None else enabled
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def finished(self, ok: bool) -> None:
        """One more report is done (`ok` False: it failed)."""
        self.done += 1
        self.failed += not ok

    def __enter__(self) -> Progress:
        if self._enabled:
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._stream.write("\r\x1b[K")
            self._stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                running = self._running()
            except Exception:  # progress must never break the run
                running = {}
            line = progress_line(self.done, self.failed, self.total, running)
            self._stream.write(f"\r{line}\x1b[K")
            self._stream.flush()
