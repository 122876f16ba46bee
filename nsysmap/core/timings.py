"""Wall time per stage of the flow, and a progress line while a stage runs.

`Stages` records how long each stage of the flow took (read, normalise,
attribute, summarise, write, ...). On a terminal it also keeps one line on
stderr up to date while a stage runs (`nsysmap: attributing ... 12 s`), and
clears it when the stage ends; written to a pipe, a file or a CI log it
prints nothing at all.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

TICK_S = 0.5  # how often the progress line is redrawn
SHOW_AFTER_S = 1.0  # stages shorter than this never show a line
_SPINNER = "|/-\\"


def is_terminal(stream: TextIO) -> bool:
    """Does `stream` go to an interactive terminal (not a pipe, file or CI log)?"""
    isatty = getattr(stream, "isatty", None)
    if isatty is None or not isatty():
        return False
    return os.environ.get("TERM") != "dumb" and not os.environ.get("CI")


class Stages:
    """Collects stage timings; shows progress on stderr when it is a terminal."""

    def __init__(self, *, stream: TextIO | None = None, progress: bool | None = None) -> None:
        self.timings: dict[str, float] = {}
        self._stream = stream if stream is not None else sys.stderr
        self._progress = is_terminal(self._stream) if progress is None else progress

    def add(self, name: str, seconds: float) -> None:
        """Count `seconds` more for stage `name` (time measured elsewhere)."""
        self.timings[name] = self.timings.get(name, 0.0) + seconds

    @contextmanager
    def stage(self, name: str, label: str | None = None) -> Iterator[None]:
        """Time the body as stage `name`; `label` is what the progress line says."""
        start = time.perf_counter()
        try:
            with self.progress(label or name):
                yield
        finally:
            self.add(name, time.perf_counter() - start)

    @contextmanager
    def progress(self, label: str) -> Iterator[None]:
        """Show the progress line while the body runs, recording no time.

        For a body that interleaves stages and times them itself (`add`).
        """
        start = time.perf_counter()
        done = threading.Event()
        ticker = None
        if self._progress:
            ticker = threading.Thread(target=self._tick, args=(label, start, done), daemon=True)
            ticker.start()
        try:
            yield
        finally:
            done.set()
            if ticker is not None:
                ticker.join()

    def _tick(self, label: str, start: float, done: threading.Event) -> None:
        shown, turn = False, 0
        while not done.wait(TICK_S):
            elapsed = time.perf_counter() - start
            if elapsed < SHOW_AFTER_S:
                continue
            spin = _SPINNER[turn % len(_SPINNER)]
            self._stream.write(f"\rnsysmap: {label} {spin} {elapsed:.0f} s\x1b[K")
            self._stream.flush()
            shown, turn = True, turn + 1
        if shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
