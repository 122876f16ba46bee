"""nsys command lines and the nsys wrapper (read/nsys/nsys_tool.py), against a stand-in nsys."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from nsysmap.core.errors import ExitCode, InputNotFound, ProfilerFailed, ToolMissing
from nsysmap.read.nsys import nsys_tool
from tests import fake_nsys

NASTY = ["--lr", "3e-4", "two words", 'it\'s "quoted"', "a; rm -rf /", "$(touch pwned)", "`x`", ""]


@pytest.fixture
def nsys_env(tmp_path, monkeypatch) -> dict[str, Path]:
    """A stand-in nsys first on PATH, logging its argv; NSYS unset."""
    exe = fake_nsys.install(tmp_path / "bin")
    log = tmp_path / "nsys.log"
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.setenv("FAKE_NSYS_LOG", str(log))
    return {"exe": exe, "log": log}


def _calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_profile_command_line_exactly():
    cmd = nsys_tool.profile_command(
        Path("/opt/nsys"), Path("out dir/capture/report"), ["python", "-m", "x", *NASTY]
    )
    assert cmd == [
        "/opt/nsys",
        "profile",
        "--trace=cuda,nvtx,osrt,cublas,cudnn",
        "--sample=none",
        "--cpuctxsw=none",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        "--output=out dir/capture/report",
        "--force-overwrite=true",
        "python",
        "-m",
        "x",
        *NASTY,
    ]
    whole_run = nsys_tool.profile_command(Path("nsys"), Path("r"), ["p"], capture_range=False)
    assert not any(arg.startswith("--capture-range") for arg in whole_run)


def test_export_command_line_exactly():
    assert nsys_tool.export_command(Path("nsys"), Path("a b/r.nsys-rep"), Path("a b/r.sqlite")) == [
        "nsys",
        "export",
        "--type=sqlite",
        "--output=a b/r.sqlite",
        "--force-overwrite=true",
        "a b/r.nsys-rep",
    ]


def test_find_nsys_prefers_the_env_variable(tmp_path, nsys_env):
    assert nsys_tool.find_nsys() == nsys_env["exe"]
    other = fake_nsys.install(tmp_path / "elsewhere")
    assert nsys_tool.find_nsys({"NSYS": str(other), "PATH": ""}) == other
    assert nsys_tool.find_nsys({"PATH": str(tmp_path / "empty")}) is None


def test_bad_nsys_variable_is_tool_missing(tmp_path):
    not_exe = tmp_path / "nsys.txt"
    not_exe.write_text("")
    for value in (str(not_exe), str(tmp_path / "missing")):
        with pytest.raises(ToolMissing) as info:
            nsys_tool.find_nsys({"NSYS": value, "PATH": ""})
        assert info.value.exit_code == ExitCode.TOOL_MISSING and value in str(info.value)


def test_require_nsys_says_what_to_do(tmp_path):
    with pytest.raises(ToolMissing) as info:
        nsys_tool.require_nsys({"PATH": str(tmp_path)})
    message = str(info.value)
    assert "\n" not in message and "NSYS=" in message and "--backend torch" in message


def _sqlite(path: Path) -> Path:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    return path


def test_export_sqlite_runs_nsys_export(tmp_path, nsys_env, monkeypatch):
    source = _sqlite(tmp_path / "prepared.sqlite")
    monkeypatch.setenv("FAKE_NSYS_EXPORT_FROM", str(source))
    rep = tmp_path / "my run" / "report.nsys-rep"
    rep.parent.mkdir()
    rep.write_bytes(b"report")
    out = nsys_tool.export_sqlite(rep)
    assert out == rep.with_suffix(".sqlite")
    assert out.read_bytes() == source.read_bytes()
    assert _calls(nsys_env["log"]) == [
        nsys_tool.export_command(nsys_env["exe"], rep, out),
    ]


def test_export_failure_reports_nsys_last_stderr_line(tmp_path, nsys_env, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_EXPORT_FAIL", "1")
    rep = tmp_path / "report.nsys-rep"
    rep.write_bytes(b"report")
    with pytest.raises(ProfilerFailed) as info:
        nsys_tool.export_sqlite(rep, tmp_path / "x.sqlite")
    assert info.value.exit_code == ExitCode.PROFILER_FAILED
    assert str(info.value).endswith("ERROR: the report file is corrupt")
    assert "\n" not in str(info.value)


def test_export_needs_the_report_and_nsys(tmp_path, monkeypatch):
    with pytest.raises(InputNotFound):
        nsys_tool.export_sqlite(tmp_path / "missing.nsys-rep")
    rep = tmp_path / "report.nsys-rep"
    rep.write_bytes(b"report")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("NSYS", raising=False)
    with pytest.raises(ToolMissing):
        nsys_tool.export_sqlite(rep)


def test_report_file_finds_either_suffix(tmp_path):
    base = tmp_path / "report"
    assert nsys_tool.report_file(base) is None
    (tmp_path / "report.qdrep").write_bytes(b"old")
    assert nsys_tool.report_file(base) == tmp_path / "report.qdrep"
    (tmp_path / "report.nsys-rep").write_bytes(b"new")
    assert nsys_tool.report_file(base) == tmp_path / "report.nsys-rep"


def test_nsys_version_and_last_line(nsys_env):
    assert nsys_tool.nsys_version(nsys_env["exe"]) == fake_nsys.VERSION_LINE
    assert nsys_tool.last_line("a\n b \n\n") == "b"
    assert nsys_tool.last_line(None) == ""
