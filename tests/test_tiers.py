"""The fast tier's selection (tests/conftest.py) names real modules and registered markers."""

from __future__ import annotations

import configparser
from pathlib import Path

from tests.conftest import FAST_EXCLUDES, FAST_MODULES

ROOT = Path(__file__).resolve().parents[1]


def test_every_fast_module_exists():
    assert sorted(m for m in FAST_MODULES if not (ROOT / "tests" / m).is_file()) == []


def test_the_excluded_markers_are_registered():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    registered = {
        line.split(":")[0].strip()
        for line in config["tool:pytest"]["markers"].splitlines()
        if line.strip()
    }
    assert set(FAST_EXCLUDES) <= registered


def test_no_fast_module_is_slow_as_a_whole():
    for name in FAST_MODULES:
        text = (ROOT / "tests" / name).read_text()
        marks = [line for line in text.splitlines() if line.startswith("pytestmark")]
        assert not [m for m in marks if any(f"mark.{x}" in m for x in FAST_EXCLUDES)], name
