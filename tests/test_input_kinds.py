"""The table of input kinds (nsysmap.sources.input_kinds): every kind complete, and a file's
kind by its name, or by its content when the content says another kind."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from devtools.synth.bulk import bulk_tables, write_export
from nsysmap.core.errors import ExitCode, NotAProfile
from nsysmap.flow.verbs import load_profile
from nsysmap.many.input_files import expand_inputs, is_report
from nsysmap.sources import input_kinds
from nsysmap.sources.input_kinds import KINDS, NSYS_REPORT, NSYS_SQLITE, TORCH_TRACE, kind_of
from tests.cli_runner import nsysmap_cli
from tests.torch_traces import STREAM, flow, kernel, launch, op, write_trace


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_export(tmp_path_factory.mktemp("kinds") / "run.sqlite", bulk_tables(40))


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    events = [op("aten::mm", 1, 10), launch(2, 5), flow("s", 5, 2, 100, "ac2g")]
    events.append(kernel("gemm", 4, 1, 5))
    return write_trace(tmp_path_factory.mktemp("kinds") / "trace.json", events)


def test_every_kind_has_a_reader_a_message_and_suffixes_of_its_own():
    assert len({kind.name for kind in KINDS}) == len(KINDS)
    for kind in KINDS:
        assert callable(kind.read) and kind.called.startswith(("a ", "an ")), kind.name
        assert kind.suffixes and all(s.startswith(".") and s == s.lower() for s in kind.suffixes)
        assert (kind.convert is None) == (kind.converted == ""), kind.name
    every = input_kinds.suffixes()
    assert len(every) == len(set(every))  # a name names one kind
    for suffix in every:  # several reports take every kind the table knows
        assert is_report(Path(f"rank0{suffix.upper()}"))
        assert input_kinds.named_kind(Path(f"x{suffix}")) is not None


def test_a_kind_by_its_name(export, trace, tmp_path):
    assert kind_of(export) is NSYS_SQLITE and kind_of(trace) is TORCH_TRACE
    packed = tmp_path / "trace.json.gz"
    packed.write_bytes(gzip.compress(trace.read_bytes()))
    assert kind_of(packed) is TORCH_TRACE
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"an nsys report: read by nsys, never probed")
    assert kind_of(report) is NSYS_REPORT


@pytest.mark.slow
def test_an_export_named_json_is_read_as_an_export(export, tmp_path, capsys):
    """Content wins when it says another kind than the name: the same profile."""
    renamed = shutil.copyfile(export, tmp_path / "run.json")
    assert kind_of(renamed) is NSYS_SQLITE
    assert_frame_equal(load_profile(renamed).ops, load_profile(export).ops)
    assert nsysmap_cli(["attribute", str(renamed), "-o", str(tmp_path / "o"), "--quiet"]) == 0
    ops = pl.read_parquet(tmp_path / "o" / "ops.parquet")
    assert ops.height == load_profile(export).ops.height > 0


def test_a_trace_named_sqlite_is_read_as_a_trace(trace, tmp_path):
    renamed = shutil.copyfile(trace, tmp_path / "trace.sqlite")
    assert kind_of(renamed) is TORCH_TRACE
    profile = load_profile(renamed)
    assert profile.meta_value("backend") == "torch.profiler"
    assert profile.ops.filter(pl.col("stream_id") == STREAM).height == 1


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("run.json", b"neither JSON nor SQLite", "not a JSON chrome trace"),
        ("run.sqlite", b"neither JSON nor SQLite" * 10, "not an SQLite file"),
        ("run.txt", b"neither JSON nor SQLite" * 10, "not an SQLite file"),
    ],
)
def test_what_no_probe_knows_gets_the_named_kinds_one_line_error(
    tmp_path, capsys, name, content, message
):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(NotAProfile, match=message):
        load_profile(path)
    assert (
        nsysmap_cli(["attribute", str(path), "-o", str(tmp_path / "o")]) == ExitCode.UNUSABLE_INPUT
    )
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_several_reports_skip_a_report_whose_conversion_is_there(tmp_path):
    for name in ("r1.nsys-rep", "r1.sqlite", "r2.qdrep", "notes.txt", "manifest.json"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in expand_inputs([tmp_path])] == ["r1.sqlite", "r2.qdrep"]
