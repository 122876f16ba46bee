"""`nsysmap attribute` on small synthetic SQLite exports with whole-millisecond timings.

Each export is written by nsysmap's builder in the nsys schema and read back
through the real reader, so these tests cover read -> normalise -> attribute
-> summarise -> write as a user runs it.
"""

from __future__ import annotations

import os

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devtools.synth import SynthExport
from nsysmap.cli import cli
from nsysmap.flow.verbs import analyse_file, load_profile
from tests import fake_nsys
from tests.cli_runner import nsysmap_cli
from tests.corpus import independent_gpu_totals
from tests.reference import range_given, reference_attribution
from tests.strategies import forest

MS = 1_000_000
PID, MAIN, AUTOGRAD, HELPER = 7, 70, 71, 72


def _device_totals(ops: pl.DataFrame) -> dict[int, tuple[int, int]]:
    sums = ops.group_by("device_id").agg(pl.len(), pl.col("dur_ns").sum())
    return {dev: (n, total) for dev, n, total in sums.iter_rows()}


def _by_name(ops: pl.DataFrame) -> dict[str, dict]:
    return {row["name"]: row for row in ops.iter_rows(named=True)}


def _step_export() -> SynthExport:
    """One step: nested ranges on the main thread, backward on the autograd thread,
    a start/end range ending on another thread, twins, a kernel without launch."""
    b = SynthExport()
    b.thread(PID, MAIN, "python")
    b.thread(PID, AUTOGRAD, "pt_autograd_0")
    b.range(PID, MAIN, 0, 100, "nsysmap:step:0", domain="nsysmap")
    b.range(PID, MAIN, 10, 40, "nsysmap:phase:forward", domain="nsysmap", style="textId")
    b.range(PID, MAIN, 11, 39, "nsysmap:fwd:Block:h.0", domain="nsysmap")
    b.range(PID, MAIN, 12, 20, "nsysmap:fwd:Linear:h.0.fc", domain="nsysmap")
    b.range(PID, MAIN, 50, 90, "nsysmap:phase:backward", domain="nsysmap")
    b.range(PID, AUTOGRAD, 55, 80, "nsysmap:bwd:Linear:h.0.fc", domain="nsysmap")
    # A start/end range started on the main thread and ended by another thread.
    b.range(PID, MAIN, 91, 99, "optimizer.step", event_type=60, end_tid=HELPER)
    for corr, tid, at, name in [
        (1, MAIN, 13, "fwd_gemm"),
        (2, MAIN, 30, "fwd_block_add"),
        (3, AUTOGRAD, 60, "bwd_gemm"),
        (4, AUTOGRAD, 85, "bwd_outside_module"),
        (5, MAIN, 95, "adam"),
        (6, MAIN, 120, "after_step"),
    ]:
        b.launch(PID, tid, at, at + 1, corr, twin=corr == 1)
        b.kernel(PID, 0, 7, at + 2, at + 4, corr, name=name)
    b.kernel(PID, 1, 9, 0, 5, 999, name="no_launch")  # launch outside the capture
    b.memcpy(PID, 0, 7, 5, 6, 7)
    b.launch(PID, MAIN, 4, 5, 7, api="cudaMemcpyAsync_v3020")
    return b


@pytest.fixture
def step_export(tmp_path):
    path = tmp_path / "step.sqlite"
    _step_export().write(path)
    return path


@pytest.mark.slow
def test_one_step_by_hand(step_export, tmp_path):
    analysis = analyse_file(step_export, tmp_path / "out")
    got = _by_name(analysis.ops)
    assert len(got) == 8  # every op once; the backtrace twin did not duplicate fwd_gemm
    fwd = got["fwd_gemm"]
    assert (fwd["step"], fwd["phase"], fwd["module"], fwd["direction"]) == (
        0,
        "forward",
        "h.0.fc",
        "forward",
    )
    assert fwd["range_path"] == (
        "nsysmap:step:0 > nsysmap:phase:forward > nsysmap:fwd:Block:h.0 > nsysmap:fwd:Linear:h.0.fc"
    )
    assert got["fwd_block_add"]["module"] == "h.0"
    bwd = got["bwd_gemm"]
    assert (bwd["tid"], bwd["phase"], bwd["step"], bwd["module"], bwd["direction"]) == (
        AUTOGRAD,
        "backward",
        0,
        "h.0.fc",
        "backward",
    )
    assert (got["bwd_outside_module"]["attribution"], got["bwd_outside_module"]["phase"]) == (
        "other_thread",
        "backward",
    )
    adam = got["adam"]
    assert (adam["range_name"], adam["phase"], adam["step"]) == ("optimizer.step", "optimizer", 0)
    assert got["after_step"]["attribution"] == "no_range"
    assert got["no_launch"]["attribution"] == "no_launch"
    assert got["[CUDA memcpy HtoD]"]["step"] == 0 and got["[CUDA memcpy HtoD]"]["phase"] is None
    coverage = dict(analysis.summaries.coverage.select("attribution", "time_ns").iter_rows())
    assert coverage == {
        "range": 9 * MS,
        "other_thread": 2 * MS,
        "no_range": 2 * MS,
        "no_launch": 5 * MS,
    }


@pytest.mark.slow
def test_time_is_conserved_per_device_against_independent_sql(step_export, tmp_path):
    ops = analyse_file(step_export, tmp_path / "out").ops
    expected = {0: (7, 13 * MS), 1: (1, 5 * MS)}
    assert _device_totals(ops) == independent_gpu_totals(step_export) == expected


@pytest.mark.slow
def test_without_nvtx_every_op_is_reported_outside_ranges(tmp_path):
    path = tmp_path / "no_nvtx.sqlite"
    _step_export().write(path, omit=("NVTX_EVENTS",))
    ops = analyse_file(path, tmp_path / "out").ops
    assert set(ops["attribution"]) == {"no_range", "no_launch"}
    assert ops.height == 8 and ops["dur_ns"].sum() == 18 * MS


@pytest.mark.slow
def test_without_runtime_table_every_op_lacks_a_launch(tmp_path):
    path = tmp_path / "no_runtime.sqlite"
    _step_export().write(path, omit=("CUPTI_ACTIVITY_KIND_RUNTIME",))
    ops = analyse_file(path, tmp_path / "out").ops
    assert set(ops["attribution"]) == {"no_launch"} and ops.height == 8


@pytest.mark.parametrize(
    ("omit", "code"),
    [
        (("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"), 5),
        (
            (
                "StringIds",
                "CUPTI_ACTIVITY_KIND_KERNEL",
                "CUPTI_ACTIVITY_KIND_MEMCPY",
                "CUPTI_ACTIVITY_KIND_RUNTIME",
                "NVTX_EVENTS",
            ),
            4,
        ),
    ],
)
def test_missing_tables_are_one_line_errors(tmp_path, capsys, omit, code):
    path = tmp_path / "partial.sqlite"
    _step_export().write(path, omit=omit)
    assert nsysmap_cli(["attribute", str(path), "-o", str(tmp_path / "out")]) == code
    err = capsys.readouterr().err.strip()
    assert err.startswith("nsysmap: error: ") and "\n" not in err


NAMES = (
    "nsysmap:step:{i}",
    "nsysmap:phase:forward",
    "nsysmap:phase:backward",
    "nsysmap:fwd:Linear:m{i}",
    "nsysmap:bwd:Linear:m{i}",
    "aten::mm",
    "user",
)


@pytest.mark.slow  # a property test against the reference: seconds
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_random_nestings_match_the_reference_through_sqlite(tmp_path_factory, data):
    b = SynthExport()
    for tid in (MAIN, AUTOGRAD):
        for start, end in data.draw(forest()):
            name = data.draw(st.sampled_from(NAMES)).format(i=data.draw(st.integers(0, 2)))
            b.range(
                PID, tid, start, end, name, style=data.draw(st.sampled_from(["text", "textId"]))
            )
    launches = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from([None, MAIN, AUTOGRAD]), st.integers(0, 60), st.integers(0, 1)
            ),
            min_size=1,
            max_size=20,
        )
    )
    for corr, (tid, at, device) in enumerate(launches, start=1):
        if tid is not None:
            b.launch(PID, tid, at, at + 0.5, corr, twin=data.draw(st.booleans()))
        b.kernel(PID, device, 7, at + 1, at + 2, corr)
    path = tmp_path_factory.mktemp("rand") / "r.sqlite"
    b.write(path)
    report = load_profile(path)
    ops = analyse_file(path, path.parent / "out").ops
    expected = reference_attribution(report.ops, report.api_calls, report.ranges)
    assert ops.height == len(launches) == len(expected)
    for row in ops.iter_rows(named=True):
        want = expected[row["op_id"]]
        assert {k: row[k] for k in want} | range_given(row) == want
    assert _device_totals(ops) == independent_gpu_totals(path)


@pytest.mark.slow
def test_an_nsys_rep_is_exported_with_nsys_then_attributed(tmp_path, monkeypatch):
    exe = fake_nsys.install(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.setenv("FAKE_NSYS_LOG", str(tmp_path / "nsys.log"))
    prepared = tmp_path / "prepared.sqlite"
    _step_export().write(prepared)
    monkeypatch.setenv("FAKE_NSYS_EXPORT_FROM", str(prepared))
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"an nsys report")
    result = CliRunner().invoke(cli, ["attribute", str(rep), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "Coverage: 61.1% of GPU time attributed to ranges" in result.stdout
    assert (tmp_path / "run.sqlite").is_file()
    assert pl.read_parquet(tmp_path / "out" / "ops.parquet").height == 8
