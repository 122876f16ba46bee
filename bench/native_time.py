"""Native time by the nsysmap function that asked for it (`python -m bench.profile --asked N`).

Where `nsysmap attribute` spends its time, most of it is native: Polars'
engine, NumPy, Arrow, the SQLite driver, or a wait for another thread. A
function table (cProfile) shows which of nsysmap's functions ran long, but
not which of its queries and array passes the native time went to: the
libraries' own Python frames (`DataFrame.select`, a decorator's wrapper)
stand between them and are shared by every caller.

`NativeTime` is a profile hook (`sys.setprofile`, on the thread that runs
the flow): it times every outermost call without Python source and gives
that time to the nearest nsysmap function on the stack that made it::

    nsysmap.attribution.paths._name_chain       <- owner: 0.22 s
      polars.functions.lazy.select               (the library's frames)
        polars.dataframe.frame.select_seq
          <method 'collect' of PyLazyFrame>      <- native call: timed

A native call that runs Python code (`list()` of a generator, a sort with
a key) is timed only while no Python frame it started runs: the Python
frames' own native calls are timed for themselves, so nothing is counted
twice and the flow's generators are not one long native call. Other
threads (the readers, the background hash) are not seen; the main thread's
wait for them is, as the time of the function that waits.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

# Where a function's owner is not found (a native call outside every nsysmap frame).
UNOWNED = ("(outside nsysmap)", 0)


@dataclass(slots=True)
class _Open:
    """A native call open: the frame that made it, its seconds so far (while no Python
    frame it started ran), and when it last resumed."""

    caller: FrameType
    seconds: float
    resumed: float


class NativeTime:
    """The profile hook: native seconds per nsysmap function (module.function, line)."""

    def __init__(self, package: str, clock: Callable[[], float] = time.perf_counter) -> None:
        self.package = str(Path(package).resolve()) + os.sep
        self.clock = clock
        self.owed: dict[tuple[str, int], float] = {}
        self.seconds = 0.0  # how long the hook ran (`running`)
        self._names: dict[CodeType, str | None] = {}
        # What runs now, innermost last: a native call, or a Python frame (None)
        # entered from within one.
        self._stack: list[_Open | None] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        now = self.clock()
        stack = self._stack
        top = stack[-1] if stack else None
        if event == "c_call":
            stack.append(_Open(frame, 0.0, now))
        elif event in ("c_return", "c_exception") and top is not None:
            stack.pop()
            owner = self._owner(top.caller)
            self.owed[owner] = self.owed.get(owner, 0.0) + top.seconds + now - top.resumed
        elif event == "call" and stack:  # Python code run by a native call: its clock stops
            if top is not None:
                top.seconds += now - top.resumed
            stack.append(None)
        elif event == "return" and stack and top is None:
            stack.pop()
            if stack and stack[-1] is not None:
                stack[-1].resumed = now  # back in the native call: its clock runs again

    @contextmanager
    def running(self) -> Iterator[NativeTime]:
        """The hook set on this thread while the body runs (`seconds`: how long)."""
        start = self.clock()
        sys.setprofile(self)
        try:
            yield self
        finally:
            sys.setprofile(None)
            self.seconds += self.clock() - start

    def native_s(self) -> float:
        """Every native call's seconds, those outside nsysmap included."""
        return sum(self.owed.values())

    def top(self, n: int) -> list[dict[str, Any]]:
        """The `n` functions with the most native time: function, line, native_s, and
        share (of every native call timed, those outside nsysmap included)."""
        total = self.native_s()
        ranked = sorted(self.owed.items(), key=lambda item: -item[1])
        return [
            {"function": name, "line": line, "native_s": seconds}
            | {"share": seconds / total if total else 0.0}
            for (name, line), seconds in ranked
            if (name, line) != UNOWNED
        ][:n]

    def _owner(self, frame: FrameType | None) -> tuple[str, int]:
        while frame is not None:
            name = self._name(frame.f_code)
            if name is not None:
                return name, frame.f_code.co_firstlineno
            frame = frame.f_back
        return UNOWNED

    def _name(self, code: CodeType) -> str | None:
        """`module.function` for code of the package, else None (looked up once a code)."""
        if code not in self._names:
            module = package_module(code.co_filename, self.package)
            self._names[code] = None if module is None else f"{module}.{code.co_name}"
        return self._names[code]


@functools.cache
def package_module(file: str, package: str) -> str | None:
    """The dotted module of `package` (a folder, its path ending in a separator) that
    `file` holds, named from the package's folder; None for a file outside it."""
    path = str(Path(file).resolve()) if file.endswith(".py") else file
    if not path.startswith(package):
        return None
    inside = path[len(package) :].removesuffix(".py").replace(os.sep, ".")
    return f"{Path(package).name}.{inside}"
