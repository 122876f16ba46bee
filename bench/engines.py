"""The benchmark's engines and the packages each needs.

An engine whose package is not installed is left out of the run with a
one-line message, so `python -m bench` works on a fresh clone whatever
optional packages it lacks; `make bench` installs them all (the `bench` extra
of setup.cfg).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Engine:
    """One engine: its name in the tables, the family --engines selects it by,
    the child module and arguments that run it, the modules it imports."""

    name: str
    family: str
    module: str
    args: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    package: str = ""  # what to pip install when `requires` is missing
    processes: str = "any"  # the exports it runs on: "any", "several" or "one" process

    def runs_on(self, processes: int) -> bool:
        """Whether it runs on exports of `processes` processes."""
        return {"any": True, "several": processes > 1, "one": processes == 1}[self.processes]


# The attribution benchmark on Nsight Systems exports, in run order.
ENGINES = (
    Engine(
        "floor (adbc)",
        "floor",
        "bench.floor",
        ("--reader", "adbc"),
        ("adbc_driver_sqlite",),
        "adbc-driver-sqlite",
    ),
    Engine(
        "floor (connectorx)",
        "floor",
        "bench.floor",
        ("--reader", "connectorx"),
        ("connectorx",),
        "connectorx",
    ),
    Engine("nsysmap", "nsysmap", "bench.nsysmap_run"),
    # The same with a budget too small for any export: one process at a time, each
    # whole (one window: NSYSMAP_WINDOWS=1).
    Engine(
        "nsysmap (by process)",
        "nsysmap",
        "bench.nsysmap_run",
        ("--memory-gb", "0.001", "--windows", "1"),
        processes="several",
    ),
    # A one-process export (`--processes 1`) read 8 time windows at a time.
    Engine(
        "nsysmap (by window)", "nsysmap", "bench.nsysmap_run", ("--windows", "8"), processes="one"
    ),
    Engine("sql", "sql", "bench.sql_engine"),
)

Finder = Callable[[str], object]


def installed(module: str, find: Finder | None = None) -> bool:
    """Whether `module` can be imported (without importing it).

    A module set to None in sys.modules is one whose import fails.
    """
    if module in sys.modules and sys.modules[module] is None:
        return False
    try:
        return (find or importlib.util.find_spec)(module) is not None
    except (ImportError, ValueError):
        return False


def available(
    engines: Iterable[Engine], find: Finder | None = None
) -> tuple[list[Engine], list[str]]:
    """The engines whose packages are installed, and one line per engine left out."""
    ready, skipped = [], []
    for engine in engines:
        missing = [m for m in engine.requires if not installed(m, find)]
        if missing:
            package = engine.package or missing[0]
            skipped.append(
                f"skipping {engine.name}: {package} is not installed "
                f"(pip install {package}, or pip install -e '.[bench]')"
            )
        else:
            ready.append(engine)
    return ready, skipped
