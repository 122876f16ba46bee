"""No command writes its one output file over what nsysmap reads.

`export --perfetto`, `report --markdown/--html` and `diff --html / -o`
refuse (one line, exit 10, nothing written, the file untouched) a target
that is the input an output folder was made from, a table or the manifest
of a folder they read or of the target's own folder, or, for a text
output, a profile or a table by its bytes or its name
(nsysmap.output.guard). And `report FILE` on a file says what `report`
reads and how to make it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from nsysmap.core.errors import ExitCode
from tests.cli_runner import nsysmap_cli
from tests.test_output_swap import _export


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """REPORT.sqlite and its output folder out/."""
    root = tmp_path_factory.mktemp("guard")
    report = _export(root / "REPORT.sqlite")
    argv = ["attribute", report, "-o", root / "out", "--quiet"]
    assert nsysmap_cli(argv) == 0
    return root


@pytest.fixture
def work(made: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of `made` to spoil, as the current folder (the manifest names the input
    by the path it was given)."""
    shutil.copytree(made, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _refused(capsys: pytest.CaptureFixture[str], target: Path, *argv: object) -> str:
    before = target.read_bytes()
    code = nsysmap_cli([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == ExitCode.OUTPUT_FAILED, err
    assert len(err.strip().splitlines()) == 1 and "will not write over it" in err, err
    assert target.read_bytes() == before
    return err


@pytest.mark.slow
def test_export_over_the_report_the_outputs_were_made_from(work, capsys):
    report = work / "REPORT.sqlite"
    err = _refused(capsys, report, "export", work / "out", "--perfetto", report)
    assert "the input" in err


@pytest.mark.slow
def test_export_over_the_input_under_another_name(work, capsys):
    """Found by its size and SHA-256, whatever path the manifest recorded."""
    copy = work / "copy.json"
    shutil.copyfile(work / "REPORT.sqlite", copy)
    _refused(capsys, copy, "export", work / "out", "--perfetto", copy)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ops.parquet", "manifest.json", "by_phase.parquet"])
def test_export_over_an_output_it_reads(work, capsys, name):
    out = work / "out"
    _refused(capsys, out / name, "export", out, "--perfetto", out / name)


def test_an_output_reached_by_another_name(work, capsys):
    os.link(work / "out" / "ops.parquet", work / "ops_link.json")
    _refused(capsys, work / "ops_link.json", "export", work / "out", "--perfetto", "ops_link.json")


@pytest.mark.parametrize("option", ["--markdown", "--html"])
def test_report_over_a_table(work, capsys, option):
    target = work / "out" / "by_step.parquet"
    _refused(capsys, target, "report", work / "out", option, target, "--quiet")


def test_diff_over_a_table_of_either_run(work, capsys):
    target = work / "out" / "ops.parquet"
    _refused(capsys, target, "diff", work / "out", work / "out", "--html", target, "--quiet")


def test_a_text_output_over_any_profile(work, capsys):
    other = work / "other.sqlite"
    shutil.copyfile(work / "REPORT.sqlite", other)
    with other.open("ab") as fh:
        fh.write(b"\0")  # another size: not the input
    _refused(capsys, other, "export", work / "out", "--perfetto", other)


def test_an_earlier_trace_is_replaced(work, capsys):
    target = work / "trace.json"
    target.write_text("{}")
    assert nsysmap_cli(["export", work / "out", "--perfetto", target]) == 0
    assert target.read_text().startswith("{") and len(target.read_text()) > 2


def test_report_on_a_profile_says_what_report_reads(work, capsys):
    code = nsysmap_cli(["report", work / "REPORT.sqlite"])
    err = capsys.readouterr().err
    assert code == ExitCode.INPUT_NOT_FOUND
    assert "no such directory" not in err and "nsysmap attribute" in err, err
    assert len(err.strip().splitlines()) == 1
