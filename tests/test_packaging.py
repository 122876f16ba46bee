"""The package as users install it: every third-party import declared in setup.cfg.

`nsysmap/` may import only what `install_requires` names, and `instrument/`
only that plus the `train` extra; a package pulled in by another one's
dependencies (numpy through transformers, say) is not enough, since a plain
`pip install nsysmap` would then fail on import.
"""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _normalised(name: str) -> str:
    """A distribution name as package indexes compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(section: str, key: str) -> set[str]:
    """The distribution names of one requirement list of setup.cfg (extras dropped)."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    names = set()
    for line in config[section][key].splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(_normalised(re.split(r"[\s\[<>=!~;]", line, maxsplit=1)[0]))
    return names


def third_party_imports(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Top-level module -> the files of `package` importing it (not the stdlib, not ours)."""
    ours = {"nsysmap", "instrument", "__future__"}
    found: dict[str, set[str]] = {}
    for path in sorted((root / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ours:
                    found.setdefault(top, set()).add(path.relative_to(root).as_posix())
    return found


def undeclared(package: str, allowed: set[str]) -> list[str]:
    """'module (files): distributions' for each import no allowed distribution gives."""
    providers = importlib.metadata.packages_distributions()
    missing = []
    for module, files in sorted(third_party_imports(package).items()):
        given_by = {_normalised(d) for d in providers.get(module, [module])}
        if not given_by & allowed:
            missing.append(f"{module} ({', '.join(sorted(files))}): {', '.join(sorted(given_by))}")
    return missing


def test_declared_parses_names_without_versions_or_extras():
    names = declared("options", "install_requires")
    assert {"polars", "click", "adbc-driver-sqlite"} <= names
    assert all(re.fullmatch(r"[a-z0-9-]+", name) for name in names)


def test_the_import_scan_sees_imports_inside_functions(tmp_path: Path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "m.py").write_text("import os\n\ndef f():\n    import numpy.linalg\n")
    (package / "n.py").write_text("from . import m\nfrom nsysmap import x\nfrom yaml import y\n")
    assert third_party_imports("pkg", tmp_path) == {"numpy": {"pkg/m.py"}, "yaml": {"pkg/n.py"}}


def test_every_nsysmap_import_is_an_install_requirement():
    assert undeclared("nsysmap", declared("options", "install_requires")) == []


def test_every_instrument_import_is_an_install_or_train_requirement():
    allowed = declared("options", "install_requires") | declared("options.extras_require", "train")
    assert undeclared("instrument", allowed) == []
