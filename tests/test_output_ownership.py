"""nsysmap removes only what it can prove it wrote, and overwrites nothing it did not write.

An output folder may hold a manifest.json nsysmap did not write, files and
folders such a manifest lists, or the user's own file with an output's name.
Each is left exactly as it was: a manifest that is not nsysmap's, or a file
in the way of an output, is refused with one line and exit 10 before
anything runs; an nsysmap manifest proves only `<table>.parquet` Parquet
files and the operations dataset `ops/rank=N/*.parquet`.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from devtools.synth import SynthExport
from nsysmap.core.errors import ExitCode, OutputFailed
from nsysmap.output.placement import MANIFEST_SCHEMA, proven_outputs, remove_outputs
from tests.cli_runner import nsysmap_cli

HOSTILE_TABLES = {"t": {"file": "keep.txt"}, "r": {"dir": "mydata"}}


def _export(path: Path) -> Path:
    """One step holding one kernel: the smallest export `attribute` writes outputs for."""
    b = SynthExport()
    b.thread(10, 11, "python")
    b.range(10, 11, 0, 10, "nsysmap:step:0")
    b.launch(10, 11, 1, 1.5, corr=1)
    b.kernel(10, 0, 7, 2, 4, corr=1, name="void k()")
    return b.write(path)


def _user_folder(out: Path, manifest: dict[str, object]) -> dict[str, bytes]:
    """`out` holding the user's keep.txt, mydata/ (nested) and `manifest`; their bytes."""
    (out / "mydata" / "deep").mkdir(parents=True)
    (out / "keep.txt").write_text("the user's notes\n")
    (out / "mydata" / "deep" / "results.csv").write_text("a,b\n1,2\n")
    (out / "manifest.json").write_text(json.dumps(manifest))
    return _tree(out)


def _tree(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str]:
    code = nsysmap_cli([str(a) for a in argv])
    err = capsys.readouterr().err
    if code:
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return code, err


def _parquet(path: Path) -> Path:
    pl.DataFrame({"x": [1]}).write_parquet(path)
    return path


def test_a_manifest_nsysmap_did_not_write_is_refused_and_nothing_is_removed(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    before = _user_folder(out, {"tables": HOSTILE_TABLES})
    code, err = _run(capsys, "attribute", _export(tmp_path / "a.sqlite"), "-o", out)
    assert code == ExitCode.OUTPUT_FAILED == 10
    assert "manifest.json was not written by nsysmap" in err
    assert _tree(out) == before


def test_run_refuses_such_a_folder_before_the_script_runs(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    before = _user_folder(out, {"tables": HOSTILE_TABLES})
    script = tmp_path / "train.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    code, err = _run(capsys, "run", "--backend", "torch", "-o", out, script)
    assert code == ExitCode.OUTPUT_FAILED and "not written by nsysmap" in err
    assert not (tmp_path / "ran").exists()
    assert _tree(out) == before


@pytest.mark.slow
def test_an_nsysmap_manifest_proves_only_its_own_parquet_tables(tmp_path, capsys):
    """A manifest with nsysmap's mark that lists the user's files: the attribution is
    written beside them, and they are untouched."""
    out = tmp_path / "out"
    out.mkdir()
    manifest = {"schema": MANIFEST_SCHEMA, "tables": HOSTILE_TABLES}
    before = _user_folder(out, manifest)
    assert _run(capsys, "attribute", _export(tmp_path / "a.sqlite"), "-o", out)[0] == 0
    after = _tree(out)
    assert {k: after[k] for k in before if k != "manifest.json"} == {
        k: v for k, v in before.items() if k != "manifest.json"
    }
    assert json.loads((out / "manifest.json").read_text())["schema"] == MANIFEST_SCHEMA
    assert (out / "ops.parquet").is_file()


def test_the_users_own_ops_parquet_is_not_overwritten(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    mine = _parquet(out / "ops.parquet").read_bytes()
    code, err = _run(capsys, "attribute", _export(tmp_path / "a.sqlite"), "-o", out)
    assert code == ExitCode.OUTPUT_FAILED and "ops.parquet" in err and "did not write" in err
    assert (out / "ops.parquet").read_bytes() == mine and not (out / "manifest.json").exists()


@pytest.mark.slow
def test_a_second_run_replaces_the_first_and_keeps_the_users_files(tmp_path, capsys):
    out = tmp_path / "out"
    assert _run(capsys, "attribute", _export(tmp_path / "a.sqlite"), "-o", out)[0] == 0
    (out / "notes.txt").write_text("mine\n")
    _parquet(out / "my_table.parquet")  # the user's, listed by no manifest: not in the way
    assert _run(capsys, "attribute", _export(tmp_path / "a.sqlite"), "-o", out)[0] == 0
    assert (out / "notes.txt").read_text() == "mine\n" and (out / "my_table.parquet").is_file()


def test_proven_outputs_needs_the_tables_own_name_and_parquet_bytes(tmp_path):
    (tmp_path / "by_phase.parquet").write_bytes(b"not parquet")
    _parquet(tmp_path / "by_step.parquet")
    _parquet(tmp_path / "other.parquet")
    (tmp_path / "ops" / "rank=0").mkdir(parents=True)
    _parquet(tmp_path / "ops" / "rank=0" / "part-0.parquet")
    tables = {
        "by_phase": {"file": "by_phase.parquet"},  # not Parquet bytes
        "by_step": {"file": "by_step.parquet"},  # proven
        "x": {"file": "other.parquet"},  # not the table's own name
        "ops": {"dir": "ops"},  # a Hive dataset of Parquet parts: proven
        "up": {"file": "../by_step.parquet"},
    }
    (tmp_path / "manifest.json").write_text(
        json.dumps({"schema": MANIFEST_SCHEMA, "tables": tables})
    )
    files, dirs = proven_outputs(tmp_path)
    assert [p.name for p in files] == ["by_step.parquet"] and [p.name for p in dirs] == ["ops"]
    (tmp_path / "ops" / "rank=0" / "notes.txt").write_text("mine\n")
    assert proven_outputs(tmp_path)[1] == []  # a folder holding anything else is not nsysmap's


@pytest.mark.parametrize(
    "manifest",
    [
        {"tables": {"ops": {"file": "ops.parquet"}}},  # no mark, no version keys
        {"schema": "someone-else", "tables": {"ops": {"file": "ops.parquet"}}},
        {"schema": MANIFEST_SCHEMA, "tables": []},
    ],
)
def test_remove_outputs_refuses_a_manifest_that_is_not_nsysmaps(tmp_path, manifest):
    ops = _parquet(tmp_path / "ops.parquet")
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(OutputFailed, match="not written by nsysmap") as info:
        remove_outputs(tmp_path)
    assert info.value.exit_code == ExitCode.OUTPUT_FAILED
    assert ops.is_file() and (tmp_path / "manifest.json").is_file()


def test_remove_outputs_of_a_manifest_written_before_the_mark(tmp_path):
    """Manifests of earlier versions (version keys, no `schema`) still prove their tables."""
    ops = _parquet(tmp_path / "ops.parquet")
    keep = tmp_path / "keep.txt"
    keep.write_text("mine\n")
    manifest = {
        "nsysmap_version": "0.9.0",
        "output_schema_version": "1.7",
        "tables": {"ops": {"file": "ops.parquet"}, "t": {"file": "keep.txt"}},
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    remove_outputs(tmp_path)
    assert not ops.exists() and not (tmp_path / "manifest.json").exists() and keep.is_file()
