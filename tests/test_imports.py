"""Import structure: no cycles between modules or packages, and every package above its floor.

The graph is built statically from every `import` statement of `nsysmap/`
(inside functions and `if TYPE_CHECKING:` blocks too: a type-only import still
says which module knows about which). Floors are declared below as data; the
fresh-interpreter test then imports every module of `nsysmap` and `instrument`
and checks that the heavy libraries each side must not load stay unloaded.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What each part of nsysmap may not import (prefixes of module names). A
# prefix matches the module itself and everything below it. The folders in
# pipeline order: core/ (the leaves) and intervals/ -> read/ -> attribution/,
# waits/ -> summaries/, infer/ -> output/ (the files written) -> sources/ ->
# flow/ -> what works on the outputs (report/, export/, diff/, flops/) -> the
# drivers (many/, then capture/, whose distributed jobs go through many/) -> cli/.
# Nothing imports a folder later in the list
# (but flops/, which adds the model's FLOPs to an analysis of flow/).
_DRIVERS = ("nsysmap.capture", "nsysmap.many", "nsysmap.cli")  # run the flow
_ON_OUTPUTS = ("nsysmap.report", "nsysmap.export", "nsysmap.diff", "nsysmap.flops")
_FLOW = ("nsysmap.sources", "nsysmap.flow", *_ON_OUTPUTS, *_DRIVERS)  # the flow and above
_MIDDLE = ("nsysmap.attribution", "nsysmap.waits", "nsysmap.summaries", "nsysmap.infer")
_NSYS_QUERY = ("nsysmap.read.nsys.nsys_probe", "nsysmap.read.nsys.nsys_sql")
_NSYS_ASSEMBLY = "nsysmap.read.nsys.nsys_sqlite"
_NSYS_FRAMES = (
    "nsysmap.read.nsys.nsys_frames",
    "nsysmap.read.nsys.nsys_gpu_ops",
    "nsysmap.read.nsys.nsys_graphs",
    "nsysmap.read.nsys.nsys_env",
)
FLOORS: dict[str, tuple[str, ...]] = {
    # Leaves: shared by everything, know nothing of the flow.
    "nsysmap.core": ("nsysmap.",),
    "nsysmap.intervals": ("nsysmap.read", *_MIDDLE, "nsysmap.output", *_FLOW),
    # Readers: files in, raw profiles out; the nsys and torch readers know nothing of
    # each other, nor of the name rules (given by their callers: window_scans.CutRules).
    "nsysmap.read": (*_MIDDLE, "nsysmap.output", *_FLOW),
    "nsysmap.read.nsys": ("nsysmap.read.torch",),
    "nsysmap.read.torch": ("nsysmap.read.nsys",),
    "nsysmap.read.nsys.nsys_tool": ("nsysmap.read",),
    # Within the nsys reader, one direction: probe -> query -> frames -> assemble
    # (nsys_sqlite); nothing calls back into an earlier stage's caller.
    "nsysmap.read.nsys.nsys_probe": ("nsysmap.read.nsys.nsys_sql", *_NSYS_FRAMES, _NSYS_ASSEMBLY),
    "nsysmap.read.nsys.nsys_sql": (*_NSYS_FRAMES, _NSYS_ASSEMBLY),
    # Frames are built in Polars only: no file, no SQL.
    "nsysmap.read.nsys.nsys_frames": (*_NSYS_QUERY, _NSYS_ASSEMBLY),
    "nsysmap.read.nsys.nsys_gpu_ops": (
        *_NSYS_QUERY,
        "nsysmap.read.nsys.nsys_frames",
        _NSYS_ASSEMBLY,
    ),
    "nsysmap.read.nsys.nsys_graphs": (
        *_NSYS_QUERY,
        "nsysmap.read.nsys.nsys_frames",
        _NSYS_ASSEMBLY,
    ),
    "nsysmap.read.nsys.nsys_env": (*_NSYS_QUERY, "nsysmap.read.nsys.nsys_frames", _NSYS_ASSEMBLY),
    "nsysmap.read.nsys.nsys_specs": ("nsysmap.",),
    # The pure middle: attribution and the waits' rules, then the summaries and inference.
    "nsysmap.attribution": ("nsysmap.read", *_MIDDLE[1:], "nsysmap.output", *_FLOW),
    "nsysmap.waits": ("nsysmap.read", "nsysmap.attribution", *_MIDDLE[2:], *_FLOW),
    "nsysmap.summaries": ("nsysmap.read", "nsysmap.infer", "nsysmap.output", *_FLOW),
    "nsysmap.infer": ("nsysmap.read", "nsysmap.summaries", "nsysmap.output", *_FLOW),
    # The files written: the writer, the sinks of the OPS rows, the folder's placement.
    "nsysmap.output": ("nsysmap.read", "nsysmap.attribution", "nsysmap.infer", *_FLOW),
    # The sources of the flow: read and normalise, whole, by process or by window.
    # The structure model reads frames (operations, ranges, inferred labels) and the
    # name rules; never the readers, the summaries, inference's code, the outputs nor
    # the flow (which builds it after inference).
    "nsysmap.structure": (
        "nsysmap.read",
        "nsysmap.summaries",
        "nsysmap.infer",
        "nsysmap.output",
        *_FLOW,
    ),
    "nsysmap.sources": ("nsysmap.infer", "nsysmap.output", *_FLOW[1:]),
    # The one flow: its drivers call it, never the reverse.
    "nsysmap.flow": _FLOW[2:],
    # What works on written outputs: never the readers, the sources or the flow's stages.
    "nsysmap.report": ("nsysmap.read", "nsysmap.sources", "nsysmap.flow", *_ON_OUTPUTS[1:3]),
    "nsysmap.export": ("nsysmap.read", "nsysmap.sources", "nsysmap.flow", "nsysmap.report"),
    "nsysmap.diff": ("nsysmap.read", "nsysmap.sources", "nsysmap.flow", "nsysmap.export"),
    "nsysmap.flops": ("nsysmap.read", "nsysmap.sources", *_ON_OUTPUTS[:3], *_DRIVERS),
    # The drivers: several reports on Dask, `nsysmap run`; and the CLI above everything.
    "nsysmap.capture": ("nsysmap.cli", *_ON_OUTPUTS[:3]),  # a job's ranks go through many/
    "nsysmap.many": ("nsysmap.capture", "nsysmap.cli", *_ON_OUTPUTS[1:]),
    "nsysmap.many.task": ("nsysmap.read", "nsysmap.summaries.summarise"),  # schedules flows
}

# The modules of instrument/ that nsysmap may import: the formats and the vocabulary
# both sides share, which import neither torch nor polars. instrument/ never imports
# nsysmap (below), so a leaf both sides need lives here, in instrument/: the phase
# names, their order and colours (instrument/phase_vocabulary.py).
SHARED_LEAVES = (
    "instrument.contract",
    "instrument.rank_guard",
    "instrument.compiled_doc",
    "instrument.flops.estimates",
    "instrument.phase_vocabulary",
)

# Libraries each side must never load, directly or through anything it imports.
NEVER_LOADED = {"nsysmap": ("torch",), "instrument": ("polars", "pyarrow", "nsysmap")}


def module_files(package: str, root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file for every .py file of `package` (a package is its __init__)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


@cache
def parsed(path: Path) -> ast.Module:
    """The syntax tree of a source file, parsed once per test process (the structure
    tests of test_imports, test_architecture, test_flow and test_sources_choose)."""
    return ast.parse(path.read_text(), str(path))


def imported_modules(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """The modules of `known` that module `name` imports anywhere in its text.

    `from p import x` is an import of p.x when that is a module, else of p.
    """
    known = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return (found & known) - {name}


def import_graph(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports."""
    files = module_files(package, root)
    return {name: imported_modules(name, path, files) for name, path in files.items()}


def find_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one node (or with a self-loop), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(root: str) -> None:  # Tarjan's algorithm, iterative
        work = [(root, iter(graph.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def package_graph(graph: Mapping[str, Iterable[str]], depth: int = 2) -> dict[str, set[str]]:
    """The module graph folded to packages: nsysmap.read.x -> nsysmap.read (depth 2)."""

    def fold(name: str) -> str:
        return ".".join(name.split(".")[:depth])

    folded: dict[str, set[str]] = {}
    for node, targets in graph.items():
        edges = folded.setdefault(fold(node), set())
        edges.update(fold(t) for t in targets if fold(t) != fold(node))
    return folded


def _within(name: str, prefix: str) -> bool:
    return name == prefix.rstrip(".") or name.startswith(
        prefix if prefix.endswith(".") else prefix + "."
    )


def floor_violations(
    graph: Mapping[str, Iterable[str]], floors: Mapping[str, tuple[str, ...]]
) -> list[str]:
    """'importer -> imported (floor of ...)' for every import below a declared floor."""
    found = []
    for node, targets in sorted(graph.items()):
        for owner, forbidden in floors.items():
            if not _within(node, owner):
                continue
            for target in sorted(targets):
                if any(_within(target, f) and not _within(target, owner) for f in forbidden):
                    found.append(f"{node} -> {target} (floor of {owner})")
    return found


# ------------------------------------------------------------ the finders


def test_find_cycles_on_a_toy_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert find_cycles(graph) == [["a", "b", "c"], ["e"]]
    assert find_cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []
    graph["c"] = set()  # break it
    assert find_cycles(graph) == [["e"]]


def test_cycle_introduced_in_a_package_is_found(tmp_path: Path):
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from toy.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from toy import a\n")  # lazy still counts
    (pkg / "c.py").write_text("from . import a\nfrom .sub.b import f\n")
    graph = import_graph("toy", tmp_path)
    assert graph["toy.c"] == {"toy.a", "toy.sub.b"}
    assert find_cycles(graph) == [["toy.a", "toy.sub.b"]]
    assert find_cycles(package_graph(graph)) == [["toy.a", "toy.sub"]]


def test_floor_violations_on_a_toy_graph():
    graph = {"p.read.x": {"p.attribution.y", "p.schemas"}, "p.attribution.y": {"p.schemas"}}
    floors = {"p.read": ("p.attribution",), "p.schemas": ("p.",)}
    assert floor_violations(graph, floors) == ["p.read.x -> p.attribution.y (floor of p.read)"]


# ------------------------------------------------------------ the real tree


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph("nsysmap")


def test_no_module_cycles(graph):
    assert find_cycles(graph) == []


def test_no_package_cycles(graph):
    assert find_cycles(package_graph(graph)) == []


def test_floors_hold(graph):
    assert set(FLOORS) <= set(graph), "a floor names a module that does not exist"
    assert floor_violations(graph, FLOORS) == []


def test_instrument_imports_no_nsysmap():
    files = module_files("instrument")
    for name, path in files.items():
        imports = imported_modules(name, path, [*files, *module_files("nsysmap")])
        assert not [m for m in imports if _within(m, "nsysmap")], name


def test_nsysmap_imports_nothing_of_devtools():
    """devtools/ (synthetic exports, the browser driver) is not installed with nsysmap."""
    known = [*module_files("nsysmap"), *module_files("devtools")]
    found = {
        name: sorted(m for m in imported_modules(name, path, known) if _within(m, "devtools"))
        for name, path in module_files("nsysmap").items()
    }
    assert {name: imports for name, imports in found.items() if imports} == {}
    assert module_files("devtools"), "devtools/ is where the tools are"


def test_nsysmap_imports_only_the_shared_leaves_of_instrument():
    known = module_files("instrument")
    beyond = {
        name: sorted(m for m in imported_modules(name, path, known) if m not in SHARED_LEAVES)
        for name, path in module_files("nsysmap").items()
    }
    assert {name: found for name, found in beyond.items() if found} == {}
    for leaf in SHARED_LEAVES:  # and the leaves import only each other
        assert imported_modules(leaf, known[leaf], known) <= set(SHARED_LEAVES), leaf


# Imports every module given on the command line, each one in turn, and prints
# the heavy libraries then loaded.
_IMPORT_ALL = """
import importlib, json, sys
for name in sys.argv[2:]:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in json.loads(sys.argv[1]) if m in sys.modules)))
"""


def _import_in_fresh_interpreter(names: list[str], watched: tuple[str, ...]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL, json.dumps(watched), *names],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"importing {names[0]} ...: {done.stderr[-2000:]}"
    return json.loads(done.stdout)


def _batches(package: str) -> list[list[str]]:
    """One batch per subpackage (and one for the top-level modules), importers first.

    Each batch starts from a fresh interpreter. Any nsysmap import first runs
    nsysmap/__init__, which imports its public names only when used, so a
    batch's own modules are what it loads fresh; importing those that nothing imports first means a
    module that only works after some other module was imported fails here.
    (`__main__` modules are entry points, run rather than imported.)
    """
    names = sorted(n for n in module_files(package) if not n.endswith(".__main__"))
    groups: dict[str, list[str]] = {}
    for name in names:
        parts = name.split(".")
        key = (
            ".".join(parts[:2])
            if len(parts) > 2 or (len(parts) == 2 and _is_package(name))
            else package
        )
        groups.setdefault(key, []).append(name)
    graph = import_graph(package)
    batches = []
    for members in groups.values():
        importers = {m: sum(m in graph[o] for o in members) for m in members}
        batches.append(sorted(members, key=lambda m: (importers[m], m)))
    return batches


def _is_package(name: str) -> bool:
    return (ROOT / Path(*name.split(".")) / "__init__.py").is_file()


@pytest.mark.fresh
@pytest.mark.parametrize("package", ["nsysmap", "instrument"])
def test_every_module_imports_in_a_fresh_interpreter(package):
    batches = _batches(package)
    entry_points = [n for n in module_files(package) if n.endswith(".__main__")]
    assert sum(map(len, batches)) + len(entry_points) == len(module_files(package))
    with ThreadPoolExecutor(max_workers=2) as pool:
        loaded = list(
            pool.map(lambda b: _import_in_fresh_interpreter(b, NEVER_LOADED[package]), batches)
        )
    for batch, libraries in zip(batches, loaded, strict=True):
        assert libraries == [], f"{batch[0]} and its batch load {libraries}"


def test_every_barred_prefix_names_modules_that_exist(graph):
    """A renamed module must not leave a floor behind that no longer bars anything."""
    barred = {prefix.rstrip(".") for bars in FLOORS.values() for prefix in bars}
    dead = sorted(p for p in barred if not any(m == p or m.startswith(p + ".") for m in graph))
    assert dead == []


@pytest.mark.fresh
def test_the_console_script_takes_ctrl_c_before_the_heavy_imports():
    """`nsysmap`'s console script (nsysmap.console) loads none of the libraries the
    commands need before it has installed its SIGINT handler (docs/cli.md, Ctrl-C)."""
    loaded = _import_in_fresh_interpreter(["nsysmap.console"], ("polars", "pyarrow", "click"))
    assert loaded == []
