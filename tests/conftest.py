"""The fast tier: `pytest --fast`, what `make check` runs (under 30 s with lint).

`--fast` runs every test not marked slow, corpus, browser, dask, fresh or
torch (markers in setup.cfg), so a new test file is in it unless marked out. A
module whose `pytestmark` names one of them is not even imported (a module
that imports torch says `pytestmark = pytest.mark.torch`). `make test` runs
everything.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

FAST_EXCLUDES = frozenset({"slow", "corpus", "browser", "dask", "fresh", "torch"})


@cache
def module_markers(path: Path) -> frozenset[str]:
    """The markers a test module's top-level `pytestmark` names, read without importing it."""
    found: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets):
            for sub in ast.walk(node):
                if (
                    isinstance(sub, ast.Attribute)
                    and isinstance(sub.value, ast.Attribute)
                    and sub.value.attr == "mark"
                ):
                    found.add(sub.attr)
    return frozenset(found)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="the fast tier (make check): every test not marked "
        f"{', '.join(sorted(FAST_EXCLUDES))}",
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if (
        config.getoption("--fast")
        and collection_path.suffix == ".py"
        and collection_path.name.startswith("test_")
        and module_markers(collection_path) & FAST_EXCLUDES
    ):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--fast"):
        return
    kept, dropped = [], []
    for item in items:
        marked = any(item.get_closest_marker(name) for name in FAST_EXCLUDES)
        (dropped if marked else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
