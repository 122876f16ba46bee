"""docs/architecture.md against the tree: every module listed, nothing listed that is gone.

The module tables hold one row per package (`nsysmap/read/`) and one per
module (`nsysmap/read/nsys/nsys_sql.py`), the path alone in backticks in the first
cell; a package's `__init__.py` and `__main__.py` are its package row. Every
other `x.py` or `folder/` in backticks anywhere on the page must name a file or
folder of the repository too (a path ending, as `read/nsys/nsys_sql.py` or `cli/`).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PACKAGES = ("nsysmap", "instrument")
_ROW = re.compile(r"^\| `((?:nsysmap|instrument)/(?:[\w/]*\w(?:\.py|/))?)` \|", re.MULTILINE)
_NAMED = re.compile(r"`([\w./-]*\w(?:\.py|/))`")
_SEARCHED = ("nsysmap", "instrument", "tests", "bench", "examples", "sample_reports", "docs")


def listed(text: str) -> set[str]:
    """The module and package paths of the module tables' rows."""
    return set(_ROW.findall(text))


def modules(root: Path = ROOT) -> set[str]:
    """What the tables must list: every module, and every package for its __init__ and __main__."""
    found = set()
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            relative = path.relative_to(root)
            if path.name in ("__init__.py", "__main__.py"):
                found.add(relative.parent.as_posix() + "/")
            else:
                found.add(relative.as_posix())
    return found


def unresolved(text: str, root: Path = ROOT) -> list[str]:
    """Every backticked `x.py` or `folder/` that no file or folder of the repository ends with."""
    tops = [root / top for top in _SEARCHED]
    paths = {"/" + p.relative_to(root).as_posix() for t in tops for p in [t, *t.rglob("*")]}
    paths |= {p + "/" for p in paths}
    return sorted(
        {name for name in _NAMED.findall(text) if not any(p.endswith("/" + name) for p in paths)}
    )


def test_the_parsers_on_a_toy_tree(tmp_path: Path):
    (tmp_path / "nsysmap" / "read").mkdir(parents=True)
    for name in ("__init__.py", "read/__init__.py", "read/sql.py", "pipeline.py"):
        (tmp_path / "nsysmap" / name).write_text("")
    (tmp_path / "instrument").mkdir()
    (tmp_path / "instrument" / "__main__.py").write_text("")
    assert modules(tmp_path) == {
        "nsysmap/",
        "nsysmap/read/",
        "nsysmap/read/sql.py",
        "nsysmap/flow/verbs.py",
        "instrument/",
    }
    page = (
        "| `nsysmap/read/` | **readers** |\n| `nsysmap/read/sql.py` | `flow/verbs.py` calls it |\n"
    )
    assert listed(page) == {"nsysmap/read/", "nsysmap/read/sql.py"}
    assert unresolved(
        page + "`read/sql.py`, `read/`, `-o/--output`, `gone.py`, `x/`", tmp_path
    ) == [
        "gone.py",
        "x/",
    ]


def test_every_module_is_listed_and_every_listed_module_exists():
    text = ARCHITECTURE.read_text()
    assert sorted(modules() - listed(text)) == [], "modules missing from docs/architecture.md"
    assert sorted(listed(text) - modules()) == [], "rows of docs/architecture.md with no module"


def test_every_file_and_folder_the_page_names_exists():
    assert unresolved(ARCHITECTURE.read_text()) == []


# ------------------------------------------------------------------ module size

MAX_LINES = 400
# Modules over MAX_LINES until they are split (others edit them now); the list only shrinks.
OVER_MAX = frozenset({"nsysmap/core/schemas.py", "nsysmap/summaries/by_range.py"})


def line_counts(root: Path = ROOT) -> dict[str, int]:
    return {
        path.relative_to(root).as_posix(): len(path.read_text().splitlines())
        for package in PACKAGES
        for path in (root / package).rglob("*.py")
    }


def test_no_module_is_over_400_lines_but_those_listed():
    counts = line_counts()
    over = {name for name, lines in counts.items() if lines > MAX_LINES}
    assert sorted(over - OVER_MAX) == [], "split these modules"
    assert sorted(OVER_MAX - over) == [], "no longer over: take them off OVER_MAX"
