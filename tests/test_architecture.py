"""docs/architecture.md against the tree: every module listed, nothing listed that is gone.

The module tables hold one row per package (`nsysmap/read/`) and one per
module (`nsysmap/read/nsys/nsys_sql.py`), the path alone in backticks in the first
cell; a package's `__init__.py` and `__main__.py` are its package row. Every
other `x.py` or `folder/` in backticks anywhere on the page must name a file or
folder of the repository too (a path ending, as `read/nsys/nsys_sql.py` or `cli/`).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from tests.test_imports import module_files, parsed

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PACKAGES = ("nsysmap", "instrument", "devtools")
_ROW = re.compile(
    r"^\| `((?:nsysmap|instrument|devtools)/(?:[\w/]*\w(?:\.py|/))?)` \|", re.MULTILINE
)
_NAMED = re.compile(r"`([\w./-]*\w(?:\.py|/))`")
_SEARCHED = (*PACKAGES, "tests", "bench", "examples", "sample_reports", "docs")


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
    for name in ("__init__.py", "read/__init__.py", "read/sql.py", "driver.py"):
        (tmp_path / "nsysmap" / name).write_text("")
    (tmp_path / "instrument").mkdir()
    (tmp_path / "instrument" / "__main__.py").write_text("")
    assert modules(tmp_path) == {
        "nsysmap/",
        "nsysmap/read/",
        "nsysmap/read/sql.py",
        "nsysmap/driver.py",
        "instrument/",
    }
    page = "| `nsysmap/read/` | **readers** |\n| `nsysmap/read/sql.py` | `driver.py` calls it |\n"
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
MAX_FUNCTION_LINES = 60


def line_counts(root: Path = ROOT) -> dict[str, int]:
    return {
        path.relative_to(root).as_posix(): len(path.read_text().splitlines())
        for package in PACKAGES
        for path in (root / package).rglob("*.py")
    }


def test_no_module_is_over_400_lines():
    counts = line_counts()
    assert sorted(name for name, lines in counts.items() if lines > MAX_LINES) == []


def function_lengths(root: Path = ROOT) -> dict[str, int]:
    """'path:function' -> its lines (its def to its last line), of every function."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(parsed(path)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    name = f"{path.relative_to(root).as_posix()}:{node.name}"
                    found[name] = (node.end_lineno or node.lineno) - node.lineno + 1
    return found


def test_function_lengths_on_a_toy_tree(tmp_path: Path):
    (tmp_path / "nsysmap").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(61))
    (tmp_path / "nsysmap" / "m.py").write_text(
        f"def long():\n{body}\n\ndef short():\n    return 1\n"
    )
    assert function_lengths(tmp_path) == {"nsysmap/m.py:long": 62, "nsysmap/m.py:short": 2}


@pytest.mark.slow
def test_no_function_is_over_60_lines():
    lengths = function_lengths()
    assert sorted(name for name, lines in lengths.items() if lines > MAX_FUNCTION_LINES) == []


# ------------------------------------------------------------------ the layout

# The package's root holds its public face only: every stage is a folder. The console
# script sits there too, so that it imports no package (cli/'s click commands) before
# it has taken Ctrl-C, and `python -m nsysmap`'s __main__.
ROOT_MODULES = {"__init__.py", "__main__.py", "_version.py", "console.py"}


def test_the_package_root_holds_only_its_public_face():
    found = {p.name for p in (ROOT / "nsysmap").glob("*.py")}
    assert found - ROOT_MODULES == set(), "put these modules in the folder of their stage"


# nsys SQL, and the storage it runs on, only in the nsys reader; and outside it only
# the reader's top-level modules are imported (not its probe, queries or specs).
NSYS_READER = "nsysmap/read/nsys/"
READER_API = {
    "nsysmap.read.nsys.nsys_sqlite",
    "nsysmap.read.nsys.window_plan",
    "nsysmap.read.nsys.nsys_tool",
}
_SQL = re.compile(
    r"\bSELECT\b[\s\S]*\bFROM\b|\bsqlite_master\b|\bpragma_\w+|\bPRAGMA\b|\bCREATE TABLE\b"
)
_STORAGE = ("sqlite3", "adbc_driver_manager", "adbc_driver_sqlite")


def sql_outside_the_reader(files: dict[str, Path], root: Path = ROOT) -> list[str]:
    """'module: what' for SQL text, a storage driver or the nsys reader's inner modules
    anywhere but in the nsys reader."""
    found = []
    for module, path in sorted(files.items()):
        if path.relative_to(root).as_posix().startswith(NSYS_READER):
            continue
        for node in ast.walk(parsed(path)):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and _SQL.search(text):
                found.append(f"{module}: SQL {text[:40]!r}")
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                if name.split(".")[0] in _STORAGE or (
                    name.startswith("nsysmap.read.nsys.") and name in files.keys() - READER_API
                ):
                    found.append(f"{module}: imports {name}")
    return sorted(set(found))


def test_the_sql_check_finds_sql_and_the_readers_inner_modules(tmp_path: Path):
    (tmp_path / "nsysmap" / "read" / "nsys").mkdir(parents=True)
    files = {
        "nsysmap.x": tmp_path / "nsysmap" / "x.py",
        "nsysmap.read.nsys.nsys_sql": tmp_path / "nsysmap" / "read" / "nsys" / "nsys_sql.py",
    }
    files["nsysmap.x"].write_text(
        'Q = f"SELECT rowid FROM {t}"\nimport sqlite3\n'
        "from nsysmap.read.nsys import nsys_sql\nfrom nsysmap.read.nsys.nsys_sql import q\n"
    )
    files["nsysmap.read.nsys.nsys_sql"].write_text('Q = "SELECT * FROM NVTX_EVENTS"\n')
    assert sql_outside_the_reader(files, tmp_path) == [
        "nsysmap.x: SQL 'SELECT rowid FROM '",
        "nsysmap.x: imports nsysmap.read.nsys.nsys_sql",
        "nsysmap.x: imports sqlite3",
    ]


@pytest.mark.slow
def test_nsys_sql_appears_only_under_read_nsys():
    assert sql_outside_the_reader(module_files("nsysmap")) == []


# ------------------------------------------------------------------ the walk

# "N. `path` `function`, `function` (from A, B): what happens there."
_STEP = re.compile(r"^(\d+)\. `([\w/]+\.py)` ((?:`\w+`(?:, )?)+)(?: \(from ([\d, ]+)\))?: \S")


def walk_steps(text: str) -> list[tuple[int, str, list[str], list[int]]]:
    """The numbered steps of the section on the walk of `nsysmap attribute FILE`:
    (number, module path under nsysmap/, functions, the steps that call them)."""
    start = text.index("## The walk of `nsysmap attribute FILE`")
    section = text[start : text.index("\n## ", start + 3)]
    steps = []
    for line in section.splitlines():
        found = _STEP.match(line)
        if found:
            number, path, functions, callers = found.groups()
            callers_list = [int(c) for c in (callers or "").split(",") if c.strip()]
            steps.append((int(number), path, re.findall(r"`(\w+)`", functions), callers_list))
    return steps


def _dotted(path: str) -> str:
    return "nsysmap." + path.removesuffix(".py").replace("/", ".")


def calls_from(caller: Path, module: str, function: str) -> bool:
    """Does the module at `caller` import `function` from `module` and call it?"""
    tree = parsed(caller)
    imported = any(
        isinstance(node, ast.ImportFrom)
        and node.module == module
        and any(alias.name == function and alias.asname is None for alias in node.names)
        for node in ast.walk(tree)
    )
    called = any(
        isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == function)
            or (isinstance(node.func, ast.Attribute) and node.func.attr == function)
        )
        for node in ast.walk(tree)
    )
    return imported and called


def walk_errors(steps: list[tuple[int, str, list[str], list[int]]], root: Path = ROOT) -> list[str]:
    """What in the walk disagrees with the code: numbering, modules, functions, callers."""
    errors = []
    if [n for n, *_ in steps] != list(range(1, len(steps) + 1)):
        errors.append("the steps are not numbered 1, 2, 3, ...")
    paths = [path for _, path, _, _ in steps]
    errors += [f"{p} is entered twice" for p in sorted({p for p in paths if paths.count(p) > 1})]
    by_number = {n: path for n, path, _, _ in steps}
    for number, path, functions, callers in steps:
        file = root / "nsysmap" / path
        if not file.is_file():
            errors.append(f"{number}: no module nsysmap/{path}")
            continue
        module = importlib.import_module(_dotted(path))
        for function in functions:
            if not callable(getattr(module, function, None)):
                errors.append(f"{number}: {path} has no function {function}")
            elif number > 1 and not any(
                c < number and calls_from(root / "nsysmap" / by_number[c], _dotted(path), function)
                for c in callers
                if c in by_number
            ):
                errors.append(f"{number}: {function} is called by none of steps {callers}")
    return errors


def test_the_walk_check_finds_a_step_that_is_not_called():
    steps = walk_steps((ROOT / "docs" / "architecture.md").read_text())
    assert walk_errors(steps) == []
    swapped = [(n, p, f, [n - 1] if n > 1 else []) for n, p, f, _ in steps]  # "called by n-1"
    wrong = walk_errors(swapped)
    assert "4: kind_of is called by none of steps [3]" in wrong  # placement does not call it
    assert walk_errors([*steps, (len(steps) + 1, steps[0][1], steps[0][2], [1])])[0].endswith(
        "entered twice"
    )
    assert walk_errors([(1, "gone.py", ["f"], [])]) == ["1: no module nsysmap/gone.py"]


def test_the_walk_of_attribute_follows_the_call_graph():
    steps = walk_steps(ARCHITECTURE.read_text())
    assert [path for _, path, _, _ in steps][:1] == ["cli/attribute.py"]
    assert "output/writer.py" in [path for _, path, _, _ in steps]  # it ends with the files
    assert len(steps) >= 15
    assert walk_errors(steps) == []
