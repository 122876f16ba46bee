"""One flow: only the flow (flow/run_stages.py) calls the stages in order, only the sources
read and normalise (sources/reading.py, once for a whole file and for its parts), only
the table of input kinds (and the sources read in parts) picks a reader.

Checked on the import statements of every module of nsysmap (inside functions
too), the way tests/test_imports.py checks the floors: a driver that put the
stages together again (as `nsysmap run` and the per-process path once did)
would have to import them.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

from tests.test_imports import module_files, parsed

# Stage function -> the modules that may import it (besides the module that defines it).
_AFTER_READING = (
    "attribute_chunks",
    "partial_summaries",
    "combine_summaries",
    "with_overlap",
    "with_waits",
    "infer_ops",
    "infer_scan",
    "check_conservation",
    "build_manifest",
)
ONLY_FROM: dict[str, set[str]] = {
    # The stages after reading: the flow alone strings them together.
    **{name: {"nsysmap.flow.run_stages"} for name in _AFTER_READING},
    # Several reports regroup each rank's work outside warm-up into its by_module and
    # by_module_phase as one report's are combined (the cross-rank module spreads).
    "combine_summaries": {"nsysmap.flow.run_stages", "nsysmap.many.measured"},
    # Summarising a frame of operations at once: the public verb, and the flow's per
    # process summaries of a flow over several processes (several reports never do).
    "summarise": {"nsysmap", "nsysmap.flow.run_stages"},
    # Reading then normalising: written once, for a whole file and for its parts.
    "normalise": {"nsysmap.sources.reading"},
    "read_trace": {"nsysmap.sources.input_kinds"},
    # by process and by time window (carried ranges renumbered between reading and
    # nesting), each given the export opened once
    "read_sqlite": {
        "nsysmap.sources.input_kinds",
        "nsysmap.sources.by_process",
        "nsysmap.sources.by_window",
    },
}


@cache
def imported_names(path: Path) -> frozenset[str]:
    """Every name imported by `from X import name` anywhere in the file."""
    nodes = ast.walk(parsed(path))
    found = (alias.name for n in nodes if isinstance(n, ast.ImportFrom) for alias in n.names)
    return frozenset(found)


@cache
def defined_names(path: Path) -> frozenset[str]:
    return frozenset(n.name for n in parsed(path).body if isinstance(n, ast.FunctionDef))


def stray_imports(files: dict[str, Path]) -> list[str]:
    """'module imports name' for each stage function imported outside its allowed modules."""
    found = []
    for module, path in sorted(files.items()):
        names = imported_names(path) - defined_names(path)
        for name in sorted(names & ONLY_FROM.keys()):
            if module not in ONLY_FROM[name]:
                found.append(f"{module} imports {name}")
    return found


def test_the_check_finds_a_driver_that_strings_stages_together(tmp_path: Path):
    driver = tmp_path / "driver.py"
    driver.write_text(
        "def run(p):\n"
        "    from nsysmap.attribution.attribute import attribute_chunks\n"
        "    return attribute_chunks(p)\n"
    )
    flow = tmp_path / "flow.py"
    flow.write_text("from nsysmap.attribution.attribute import attribute_chunks\n")
    files = {"nsysmap.capture.driver": driver, "nsysmap.flow.run_stages": flow}
    assert stray_imports(files) == ["nsysmap.capture.driver imports attribute_chunks"]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ONLY_FROM))
def test_each_stage_is_imported_where_it_may_be_and_nowhere_else(name: str):
    files = module_files("nsysmap")
    strays = [line for line in stray_imports(files) if line.endswith(f" {name}")]
    assert strays == []
    importers = {m for m, p in files.items() if name in imported_names(p) - defined_names(p)}
    assert importers == ONLY_FROM[name]  # the list above is not stale either
