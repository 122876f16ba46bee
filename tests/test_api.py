"""The public API: `nsysmap.__all__` is what docs/api.md lists, and its example runs."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import polars as pl
import pytest

import nsysmap
from devtools.synth.bulk import write_export
from devtools.synth.tile import gpt_tables

API_MD = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def listed_names(text: str) -> set[str]:
    """The names in the first column of docs/api.md's tables (`| `name` | ...`)."""
    return set(re.findall(r"^\| `(\w+)` \|", text, flags=re.MULTILINE))


def docstring_example() -> str:
    """The code block of nsysmap's module docstring (the lines after `::`)."""
    block = re.search(r"::\n\n((?:    .*\n)+)", nsysmap.__doc__ or "")
    assert block is not None, "no example in nsysmap's docstring"
    return textwrap.dedent(block.group(1))


def code_lines(code: str) -> list[str]:
    """The lines of `code` without comments and blank lines."""
    lines = (line.split("#", 1)[0].rstrip() for line in code.splitlines())
    return [line for line in lines if line]


def test_all_is_what_api_md_lists():
    assert listed_names(API_MD.read_text()) == set(nsysmap.__all__)
    for name in nsysmap.__all__:
        assert hasattr(nsysmap, name), name


def test_the_name_check_sees_a_missing_row():
    text = API_MD.read_text().replace("| `write` |", "| write |")
    assert listed_names(text) == set(nsysmap.__all__) - {"write"}


def test_api_md_shows_the_docstrings_example():
    shown = API_MD.read_text().split("```python\n", 1)[1].split("```", 1)[0]
    assert code_lines(shown) == code_lines(docstring_example())


@pytest.mark.slow
def test_the_docstrings_example_runs(tmp_path, monkeypatch):
    """On a small synthetic export named run.sqlite: the outputs are written."""
    write_export(tmp_path / "run.sqlite", gpt_tables(300, seed=1, n_layer=2, processes=1))
    monkeypatch.chdir(tmp_path)
    code = docstring_example()
    assert code.count("nsysmap.") >= 3
    scope: dict[str, object] = {}
    exec(compile(code, "nsysmap.__doc__", "exec"), scope)  # our own docstring
    profile = scope["profile"]
    assert isinstance(profile, nsysmap.NestedProfile)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    ops = pl.read_parquet(tmp_path / "out" / "ops.parquet")
    assert ops.height == manifest["tables"]["ops"]["rows"] == profile.ops.height > 0
    assert manifest["nsysmap_version"] == nsysmap.__version__


@pytest.mark.parametrize("name", ["analyse_report", "write_analysis", "STREAM_OPS"])
def test_private_names_are_not_exported(name):
    assert name not in nsysmap.__all__
