"""The fast tier's selection (tests/conftest.py): by marker, with registered markers only."""

from __future__ import annotations

import configparser
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FAST_EXCLUDES, module_markers

ROOT = Path(__file__).resolve().parents[1]


def registered_markers() -> set[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return {
        line.split(":")[0].strip()
        for line in config["tool:pytest"]["markers"].splitlines()
        if line.strip()
    }


def test_the_excluded_markers_are_registered():
    assert set(FAST_EXCLUDES) <= registered_markers()


def test_every_module_marker_is_registered():
    used = {m for path in (ROOT / "tests").glob("test_*.py") for m in module_markers(path)}
    assert sorted(used - registered_markers() - {"parametrize", "skipif", "usefixtures"}) == []


def test_module_markers_reads_every_spelling_of_pytestmark(tmp_path: Path):
    cases = {
        "pytestmark = pytest.mark.slow  # why\n": {"slow"},
        "pytestmark = [pytest.mark.corpus, needs_corpus, pytest.mark.dask]\n": {"corpus", "dask"},
        "pytestmark: list = [\n    pytest.mark.gpu,\n    pytest.mark.skipif(True),\n]\n": {
            "gpu",
            "skipif",
        },
        "import pytest\n\n@pytest.mark.slow\ndef test_a():\n    pass\n": set(),
    }
    for number, (text, expected) in enumerate(cases.items()):
        path = tmp_path / f"test_{number}.py"
        path.write_text(text)
        assert module_markers(path) == expected, text


@pytest.mark.fresh
def test_the_fast_tier_never_imports_torch():
    """Every test module --fast imports, imported in one fresh interpreter: torch stays out."""
    fast = sorted(
        f"tests.{path.stem}"
        for path in (ROOT / "tests").glob("test_*.py")
        if not module_markers(path) & FAST_EXCLUDES
    )
    code = (
        "import importlib, json, sys\n"
        f"for name in {fast!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:3]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert json.loads(result.stdout.splitlines()[-1]) == []
