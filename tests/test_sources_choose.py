"""Whole, by process or by window: one decision (nsysmap.sources.choose), one table.

The table gives `decide` every combination that matters: the file's kind (read
in parts or not), the processes with GPU work, the expected peak of a whole
read against the memory budget, NSYSMAP_WINDOWS, and several reports at once.
A second test fails when a module other than sources/choose.py makes the
choice: imports what the choice reads (the processes, the expected peak, the
memory available, NSYSMAP_WINDOWS) or the readers in parts, or asks a kind
whether it can be read in parts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from nsysmap.sources.choose import BY_PROCESS, BY_WINDOW, WHOLE, Choice, Facts, decide
from tests.test_imports import module_files, parsed

GB = 1e9
NONE: list[int] | None = None
# kind read in parts, processes with GPU work, expected peak, budget, NSYSMAP_WINDOWS,
# several reports -> how, and the windows asked for.
TABLE = [
    # A kind that is not read in parts (a torch trace, an nsys report) is read whole.
    (False, [1, 2], 9 * GB, 1 * GB, None, False, WHOLE, 0),
    (False, [1], 9 * GB, 1 * GB, 4, False, WHOLE, 0),
    (False, [1, 2], 1 * GB, None, None, True, WHOLE, 0),
    # Fits in the budget: whole, whatever the processes.
    (True, [1, 2], 1 * GB, 2 * GB, None, False, WHOLE, 0),
    (True, [1], 1 * GB, 2 * GB, None, False, WHOLE, 0),
    (True, [1, 2], 2 * GB, 2 * GB, None, False, WHOLE, 0),  # at the budget: fits
    # Over the budget: by process where two or more have work, else by window;
    # each process in windows too where its share of the need is over the budget.
    (True, [1, 2], 3 * GB, 2 * GB, None, False, BY_PROCESS, 0),
    (True, [1, 2], 4 * GB, 2 * GB, None, False, BY_PROCESS, 0),  # at the budget each
    (True, [1, 2, 3], 9 * GB, 1 * GB, None, False, BY_PROCESS, 6),
    (True, [1, 2], 5 * GB, 2 * GB, None, False, BY_PROCESS, 4),
    (True, [1], 3 * GB, 2 * GB, None, False, BY_WINDOW, 4),  # twice the peak over the budget
    (True, [1], 9 * GB, 1 * GB, None, False, BY_WINDOW, 18),
    (True, [1], 9 * GB, 0.0, None, False, BY_WINDOW, 2 * int(9 * GB)),  # no memory: a byte
    # Not every row says its process, or no process has work: whole.
    (True, NONE, 9 * GB, 1 * GB, None, False, WHOLE, 0),
    (True, [], 9 * GB, 1 * GB, None, False, WHOLE, 0),
    # The budget unknown (no /proc/meminfo): never split for size.
    (True, [1, 2], 9 * GB, None, None, False, WHOLE, 0),
    (True, [1], 9 * GB, None, None, False, WHOLE, 0),
    # NSYSMAP_WINDOWS forces windows on one process, whatever the budget ...
    (True, [1], 1 * GB, 2 * GB, 3, False, BY_WINDOW, 3),
    (True, [1], 9 * GB, None, 5, False, BY_WINDOW, 5),
    (True, [1], 9 * GB, 1 * GB, 3, False, BY_WINDOW, 3),
    (True, [1], 9 * GB, 1 * GB, 1, False, WHOLE, 0),  # one window: whole
    # ... on several processes only when over the budget (read by process, each in
    # those windows);
    (True, [1, 2], 1 * GB, 2 * GB, 3, False, WHOLE, 0),
    (True, [1, 2], 9 * GB, 1 * GB, 3, False, BY_PROCESS, 3),
    (True, [1, 2], 9 * GB, 1 * GB, 1, False, BY_PROCESS, 0),
    # Several reports: every process of a report its own flow, whatever its size;
    (True, [1, 2], 1 * GB, 2 * GB, None, True, BY_PROCESS, 0),
    (True, [1, 2], 1 * GB, None, None, True, BY_PROCESS, 0),
    # a report of one process is read as any file.
    (True, [1], 1 * GB, 2 * GB, None, True, WHOLE, 0),
    (True, [1], 9 * GB, 1 * GB, None, True, BY_WINDOW, 18),
    (True, NONE, 9 * GB, 1 * GB, None, True, WHOLE, 0),
]


@pytest.mark.parametrize(
    ("parts", "processes", "need", "budget", "forced", "ranks", "how", "windows"), TABLE
)
def test_the_decision_table(parts, processes, need, budget, forced, ranks, how, windows):
    facts = Facts(parts, int(need), budget, lambda: processes, forced, ranks)
    found = decide(facts)
    assert (found.how, found.windows) == (how, windows)
    expected = () if how == WHOLE else tuple(processes)
    each = (windows,) * len(processes) if how == BY_PROCESS and windows and not ranks else ()
    assert found == Choice(how, expected, windows, each)


# Each process's windows from its share of the rows of GPU work, where they are known.
SHARES = [
    # even rows: as even shares
    ({1: 50, 2: 50}, 8 * GB, 2 * GB, None, (4, 4)),
    # most of the work on one process: it alone over the budget, in windows
    ({1: 90, 2: 10}, 4 * GB, 2 * GB, None, (4, 0)),
    ({1: 10, 2: 30, 3: 60}, 6 * GB, 1 * GB, None, (0, 4, 8)),
    # NSYSMAP_WINDOWS: every process in those windows, whatever its share
    ({1: 90, 2: 10}, 4 * GB, 2 * GB, 3, (3, 3)),
    # no rows known: even shares
    ({}, 8 * GB, 2 * GB, None, (4, 4)),
]


@pytest.mark.parametrize(("rows", "need", "budget", "forced", "each"), SHARES)
def test_each_process_has_the_windows_of_its_share(rows, need, budget, forced, each):
    facts = Facts(
        True, int(need), budget, lambda: sorted(rows) or [1, 2], forced, rows=lambda: rows
    )
    found = decide(facts)
    assert (found.how, found.each, found.windows) == (BY_PROCESS, each, max(each))


def test_the_processes_are_counted_only_when_the_decision_needs_them():
    def counted() -> list[int]:
        raise AssertionError("counted although the file fits and no window is forced")

    assert decide(Facts(True, 1, 2.0, counted)) == Choice(WHOLE)
    assert decide(Facts(False, 9, 1.0, counted, forced=4, ranks=True)) == Choice(WHOLE)


# What the choice reads, and the readers of parts: no other module may import them
# or ask a kind whether it can be read in parts.
CHOOSER = "nsysmap.sources.choose"
DECIDING_NAMES = {
    "decide",
    "gpu_processes",
    "gpu_process_rows",
    "expected_bytes",
    "available_bytes",
    "split_budget_bytes",
    "forced_windows",
    "WINDOWS_ENV",
    "process_profiles",
    "process_part",
    "window_plan",
    "window_profiles",
    "window_parts",
    "plan_windows",
}
# Where each is defined, or used by the readers below the choice.
DEFINED_IN = {
    "nsysmap.read.nsys.nsys_sqlite": {"gpu_processes", "gpu_process_rows", "expected_bytes"},
    "nsysmap.read.nsys.window_plan": {"plan_windows"},
    "nsysmap.sources.by_process": {"process_profiles", "process_part"},
    "nsysmap.sources.by_window": {"window_plan", "window_profiles", "window_parts", "plan_windows"},
    "nsysmap.core.memory": {"available_bytes", "split_budget_bytes"},
}
PARTS_FLAG = "by_process"  # InputKind.by_process: can be read in parts
FLAG_ALLOWED = {CHOOSER, "nsysmap.sources.input_kinds"}


def choosers(files: dict[str, Path]) -> list[str]:
    """'module: name' for each module that makes (a part of) the choice."""
    found = []
    for module, path in sorted(files.items()):
        if module == CHOOSER:
            continue
        used = set()
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ImportFrom):
                used |= {alias.name for alias in node.names} & DECIDING_NAMES
            elif isinstance(node, ast.Attribute) and node.attr in DECIDING_NAMES:
                used.add(node.attr)
            elif (
                isinstance(node, ast.Attribute)
                and node.attr == PARTS_FLAG
                and module not in FLAG_ALLOWED
            ):
                used.add(f".{PARTS_FLAG}")
        used -= DEFINED_IN.get(module, set())
        found += [f"{module}: {name}" for name in sorted(used)]
    return found


def test_the_check_finds_a_second_chooser(tmp_path: Path):
    (tmp_path / "a.py").write_text("from nsysmap.read.nsys.nsys_sqlite import gpu_processes\n")
    (tmp_path / "b.py").write_text("def f(kind):\n    return kind.by_process\n")
    (tmp_path / "c.py").write_text("from nsysmap.sources import choose\nchoose.decide(x)\n")
    (tmp_path / "d.py").write_text("def plan_local(available_bytes):\n    return 1\n")
    files = {f"nsysmap.x.{n}": tmp_path / f"{n}.py" for n in "abcd"}
    assert choosers(files) == [
        "nsysmap.x.a: gpu_processes",
        "nsysmap.x.b: .by_process",
        "nsysmap.x.c: decide",
    ]


def test_only_sources_choose_makes_the_choice():
    assert choosers(module_files("nsysmap")) == []
