"""Every output path of every command that cannot be written: one line, exit 10, nothing written.

Each case makes the output a directory, puts it under a file, or under a folder
without write permission, runs the command in-process, and checks the exit
code, the one-line message, and that every file under the test's folder is
byte for byte what it was before (no report.md, no tables, no half a trace).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from devtools.synth import SynthExport
from nsysmap.core.errors import ExitCode
from nsysmap.flow.verbs import analyse_file
from nsysmap.many.write import LAYOUT
from nsysmap.report.html.page import plotly_js
from tests.cli_runner import nsysmap_cli


def _export(path: Path) -> Path:
    """One step with two kernels on one device: the smallest run `report` and `export` take."""
    b = SynthExport()
    b.thread(10, 11, "python")
    b.range(10, 11, 0, 20, "nsysmap:step:0")
    for i, at in enumerate([1, 5]):
        b.launch(10, 11, at, at + 0.5, corr=i + 1)
        b.kernel(10, 0, 7, at + 1, at + 3, corr=i + 1, name=f"void k{i}()")
    return b.write(path)


@pytest.fixture(scope="module")
def made_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("made")
    analyse_file(_export(root / "run.sqlite"), root / "run")
    return root / "run"


@pytest.fixture
def work(made_run: Path, tmp_path: Path) -> Path:
    """tmp_path holding run/ and other/ (two copies of one run), a_dir/ and a_file."""
    shutil.copytree(made_run, tmp_path / "run")
    shutil.copytree(made_run, tmp_path / "other")
    (tmp_path / "a_dir").mkdir()
    (tmp_path / "a_dir" / "mine.txt").write_text("mine\n")
    (tmp_path / "a_file").write_text("mine\n")
    return tmp_path


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` with its bytes (None: a directory)."""
    return {
        str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
        for p in sorted(root.rglob("*"))
    }


def _refused(work: Path, capsys: pytest.CaptureFixture[str], argv: list[object]) -> str:
    """Run `nsysmap ARGV` (paths relative to `work`); it must exit 10 in one line, writing
    nothing. Returns the line."""
    before = _tree(work)
    code = nsysmap_cli(argv)
    err = capsys.readouterr().err
    assert code == ExitCode.OUTPUT_FAILED, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("nsysmap: error: ") and "internal error" not in err, err
    assert "Traceback" not in err, err
    assert _tree(work) == before
    return err


Argv = Callable[[Path], list[object]]
CASES: dict[str, tuple[Argv, str]] = {
    "report_html_a_directory": (
        lambda w: ["report", w / "run", "--html", w / "a_dir"],
        "a_dir: is a directory",
    ),
    "report_html_under_a_file": (
        lambda w: ["report", w / "run", "--html", w / "a_file" / "r.html"],
        "is a file",
    ),
    "report_markdown_a_directory": (
        lambda w: ["report", w / "run", "--markdown", w / "a_dir"],
        "a_dir: is a directory",
    ),
    "report_markdown_under_a_file": (
        lambda w: ["report", w / "run", "--markdown", w / "a_file" / "r.md"],
        "is a file",
    ),
    "export_perfetto_a_directory": (
        lambda w: ["export", w / "run", "--perfetto", w / "a_dir"],
        "a_dir: is a directory",
    ),
    "export_perfetto_under_a_file": (
        lambda w: ["export", w / "run", "--perfetto", w / "a_file" / "t.json"],
        "is a file",
    ),
    "diff_html_a_directory": (
        lambda w: ["diff", w / "run", w / "other", "--html", w / "a_dir", "--quiet"],
        "a_dir: is a directory",
    ),
    "diff_output_a_file": (
        lambda w: ["diff", w / "run", w / "other", "-o", w / "a_file", "--quiet"],
        "exists and is not a directory",
    ),
    "attribute_several_output_a_file": (
        lambda w: ["attribute", w / "run.sqlite", w / "run.sqlite", "-o", w / "a_file"],
        "exists and is not a directory",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_an_output_that_cannot_be_written_is_refused_before_writing(work, capsys, case):
    _export(work / "run.sqlite")
    argv, fragment = CASES[case]
    assert fragment in _refused(work, capsys, argv(work))


@pytest.mark.slow
def test_report_html_alone_when_its_default_file_is_a_directory(work, capsys):
    (work / "run" / "report.html").mkdir()
    err = _refused(work, capsys, ["report", work / "run", "--html"])
    assert "report.html: is a directory" in err


def test_report_when_its_default_markdown_file_is_a_directory(work, capsys):
    (work / "run" / "report.md").mkdir()
    err = _refused(work, capsys, ["report", work / "run"])
    assert "report.md: is a directory" in err


def test_diff_output_directory_whose_table_name_is_a_directory(work, capsys):
    (work / "a_dir" / "diff.parquet").mkdir()
    err = _refused(work, capsys, ["diff", work / "run", work / "other", "-o", work / "a_dir"])
    assert "diff.parquet: is a directory" in err


def test_a_multi_rank_report_to_a_directory(work, capsys):
    ranks = work / "ranks"
    ranks.mkdir()
    (ranks / "manifest.json").write_text(json.dumps({"layout": LAYOUT, "tables": {}}))
    err = _refused(work, capsys, ["report", ranks, "--markdown", work / "a_dir"])
    assert "a_dir: is a directory" in err


@pytest.mark.parametrize("command", ["report", "export", "diff"])
def test_an_output_under_a_folder_without_write_permission(work, capsys, monkeypatch, command):
    locked = work / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, m: False if Path(p) == locked else real_access(p, m)
    )
    argv: dict[str, list[object]] = {
        "report": ["report", work / "run", "--html", locked / "r.html"],
        "export": ["export", work / "run", "--perfetto", locked / "t.json"],
        "diff": ["diff", work / "run", work / "other", "--html", locked / "d.html", "--quiet"],
    }
    assert "Permission denied" in _refused(work, capsys, argv[command])


@pytest.mark.slow
def test_the_same_outputs_that_can_be_written_are(work, capsys):
    """The cases above fail for their paths alone: the same commands elsewhere succeed."""
    assert nsysmap_cli(["report", work / "run", "--html", work / "r.html", "--quiet"]) == 0
    assert nsysmap_cli(["export", work / "run", "--perfetto", work / "t.json"]) == 0
    diff = ["diff", work / "run", work / "other", "-o", work / "d", "--html", work / "d.html"]
    assert nsysmap_cli([*diff, "--quiet"]) == 0
    written = ["r.html", "run/report.md", "t.json", "d/diff.parquet", "d.html"]
    assert all((work / name).is_file() for name in written)


@pytest.mark.parametrize("command", ["report", "diff"])
def test_html_without_plotly_is_refused_before_writing(work, capsys, monkeypatch, command):
    """Exit 6 (a tool missing), and no report.md or diff.parquet written before it."""
    monkeypatch.setitem(sys.modules, "plotly.offline", None)  # import fails
    plotly_js.cache_clear()
    argv: dict[str, list[object]] = {
        "report": ["report", work / "run", "--html"],
        "diff": ["diff", work / "run", work / "other", "-o", work / "d", "--html", work / "d.html"],
    }
    before = _tree(work)
    try:
        code = nsysmap_cli(argv[command])
    finally:
        plotly_js.cache_clear()
    err = capsys.readouterr().err
    assert code == ExitCode.TOOL_MISSING and "needs the plotly package" in err
    assert len(err.strip().splitlines()) == 1
    assert _tree(work) == before
