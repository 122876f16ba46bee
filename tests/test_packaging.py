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
import os
import re
import shutil
import subprocess
import sys
import zipfile
from functools import cache
from pathlib import Path

import pytest

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


@cache
def _providers() -> dict[str, list[str]]:
    """Top-level module -> the installed distributions that provide it."""
    return dict(importlib.metadata.packages_distributions())


def undeclared(package: str, allowed: set[str]) -> list[str]:
    """'module (files): distributions' for each import no allowed distribution gives."""
    providers = _providers()
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


@pytest.mark.slow
def test_every_nsysmap_import_is_an_install_requirement():
    assert undeclared("nsysmap", declared("options", "install_requires")) == []


@pytest.mark.slow
def test_every_instrument_import_is_an_install_or_train_requirement():
    allowed = declared("options", "install_requires") | declared("options.extras_require", "train")
    assert undeclared("instrument", allowed) == []


def test_the_tools_are_not_among_the_packages_installed():
    """setup.cfg's `packages = find:` finds nsysmap and instrument, never devtools/
    (the synthetic exports and the browser driver, which tests and benchmarks import)."""
    from setuptools import find_packages

    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    include = config["options.packages.find"]["include"].split()
    found = find_packages(str(ROOT), include=include)
    assert "nsysmap" in found and "nsysmap.read.nsys" in found and "instrument" in found
    assert not [name for name in found if name.startswith("devtools") or name.endswith(".synth")]
    assert (ROOT / "devtools" / "synth" / "bulk.py").is_file()


# ------------------------------------------------- installed as users install it

SAMPLE = ROOT / "sample_reports" / "gpt2_tiny_train.sqlite"


def _run(command: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run one command with no trace of the development environment (PYTHONPATH, the venv)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _ok(result: subprocess.CompletedProcess[str]) -> None:
    tail = (result.stdout + result.stderr)[-3000:]
    assert result.returncode == 0, f"{' '.join(result.args)} exited {result.returncode}:\n{tail}"


# What the wheel is built from (setup.cfg: its packages and long description).
WHEEL_SOURCES = ("setup.cfg", "pyproject.toml", "README.md", "nsysmap", "instrument")


def _wheel_source(to: Path) -> str:
    """A clean copy of what the wheel is built from: a build in the repository would
    leave build/ there, whose stale modules a later wheel would pick up."""
    for name in WHEEL_SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, to / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            to.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, to / name)
    return str(to)


@pytest.mark.slow
@pytest.mark.fresh
def test_the_wheel_installs_alone_and_every_command_runs(tmp_path: Path):
    """Build a wheel, install it with only its declared dependencies in a fresh venv, run it.

    The venv has nothing of the development environment, so a package nsysmap
    imports without declaring it fails here as it would for a user. pip's own
    cache makes reruns fast (about a minute on the 2-vCPU development machine,
    most of it installing the dependencies). Skips when the package index cannot be
    reached.
    """
    venv = tmp_path / "venv"
    _ok(_run([sys.executable, "-m", "venv", str(venv)], tmp_path))
    python = venv / "bin" / "python"
    probe = _run(
        [str(python), "-m", "pip", "download", "--no-deps", "--dest", "probe", "click"], tmp_path
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no message"])[-1]
        pytest.skip(f"the package index cannot be reached (pip download click: {last})")
    source, wheels = _wheel_source(tmp_path / "source"), tmp_path / "wheels"
    _ok(_run([str(python), "-m", "pip", "wheel", "--no-deps", "-w", str(wheels), source], tmp_path))
    (wheel,) = wheels.glob("nsysmap-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
    assert {"nsysmap", "instrument"} <= tops and "devtools" not in tops, tops
    _ok(_run([str(python), "-m", "pip", "install", str(wheel)], tmp_path))
    where = _run([str(python), "-c", "import nsysmap; print(nsysmap.__file__)"], tmp_path)
    _ok(where)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout

    nsysmap = str(venv / "bin" / "nsysmap")
    commands = [
        [nsysmap, "--help"],
        [nsysmap, "attribute", str(SAMPLE), "-o", "run", "--quiet"],
        [nsysmap, "report", "run", "--html", "--quiet"],
        [nsysmap, "export", "run", "--perfetto", "run.trace.json"],
        [nsysmap, "diff", "run", "run", "--html", "diff.html"],
        [nsysmap, "flops", "--help"],
        [nsysmap, "run", "--help"],
    ]
    for command in commands:
        _ok(_run(command, tmp_path))
    for written in (
        "run/manifest.json",
        "run/report.md",
        "run/report.html",
        "run.trace.json",
        "diff.html",
    ):
        assert (tmp_path / written).is_file(), written
