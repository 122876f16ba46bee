"""The scalable engine on synthetic training exports: against the reference, streamed, vs SQL."""

from __future__ import annotations

import gc
import json
import weakref

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from bench import compare, sql_engine
from devtools.synth.bulk import bulk_tables, write_export
from devtools.synth.tile import gpt_tables
from nsysmap.attribution.attribute import attribute
from nsysmap.attribution.rules import BUILTIN
from nsysmap.core.timings import Stages
from nsysmap.flow import run_stages as flow
from nsysmap.flow.run_stages import Settings
from nsysmap.flow.verbs import analyse, analyse_file, load_profile
from nsysmap.output import ops_sinks as streamed
from nsysmap.output.ops_sinks import HeldOps, HoldOps, OpsFile
from nsysmap.read.nsys.nsys_sqlite import expected_bytes
from nsysmap.sources import choose
from nsysmap.sources.choose import BY_PROCESS, BY_WINDOW, WHOLE, Choice, choice
from nsysmap.sources.reading import whole_profile
from tests.reference import reference_attribution

pytestmark = pytest.mark.slow  # large synthetic exports

TABLES = ("ops", "coverage", "by_phase", "by_step", "by_module", "by_module_phase")
TABLES += ("by_kernel", "by_category", "by_range")


@pytest.fixture(scope="module")
def gpt_export(tmp_path_factory: pytest.TempPathFactory):
    """A 2-step GPT-2-like export: two processes, forward and backward threads, NCCL."""
    return write_export(tmp_path_factory.mktemp("gpt") / "gpt.sqlite", gpt_tables(2000, seed=3))


def _check_against_reference(path) -> pl.DataFrame:
    report = load_profile(path)
    ops = attribute(report)
    expected = reference_attribution(report.ops, report.api_calls, report.ranges)
    assert ops.height == report.ops.height == len(expected)
    for row in ops.iter_rows(named=True):
        want = expected[row["op_id"]]
        assert {k: row[k] for k in want} == want, row
    return ops


def test_gpt_export_matches_the_reference_op_by_op(gpt_export):
    ops = _check_against_reference(gpt_export)
    # The export exercises every rule: backward kernels get their phase from
    # the main thread, some backward ops their module through `stashed seq`.
    backward = ops.filter(pl.col("phase") == "backward")
    assert backward["tid"].n_unique() == 4  # the autograd thread and the main thread, twice
    wpe = backward.filter(pl.col("module") == "transformer.wpe")
    assert wpe.height and wpe["range_path"].str.contains("nsysmap:bwd").not_().all()
    assert set(ops["device_id"]) == {0, 1} and set(ops["kind"]) == {"kernel", "memcpy", "memset"}
    # Two all-reduce buckets (after blocks 3 and 7) per step and process.
    assert ops.filter(pl.col("category") == "communication").height == 2 * 2 * 2


def test_bulk_export_matches_the_reference_op_by_op(tmp_path):
    _check_against_reference(write_export(tmp_path / "bulk.sqlite", bulk_tables(2000)))


def test_streamed_outputs_equal_the_in_memory_ones(gpt_export, tmp_path, monkeypatch):
    held = analyse_file(gpt_export, tmp_path / "held", stages=Stages(progress=False))
    monkeypatch.setattr(streamed, "STREAM_OPS", 100)
    monkeypatch.setattr(streamed, "CHUNK_ROWS", 333)
    streamed_run = analyse_file(gpt_export, tmp_path / "streamed", stages=Stages(progress=False))
    assert isinstance(held.store, HeldOps) and isinstance(streamed_run.store, OpsFile)
    assert streamed_run.store.path == tmp_path / "streamed" / "ops.parquet"
    # Streamed rows are inferred a device at a time: the same tables.
    assert held.inferred is not None and len(held.inferred.found) == 2
    assert streamed_run.inferred is not None
    assert streamed_run.inferred.lines(cpu=False) == held.inferred.lines(cpu=False)
    order = ["device_id", "what"]
    assert_frame_equal(
        streamed_run.inferred.agreement.sort(order), held.inferred.agreement.sort(order)
    )
    tables = ("inferred", "by_inferred_block", "idle", "stream_idle", "launch_cost", "structure")
    for table in (*TABLES, *tables):
        a = pl.read_parquet(tmp_path / "held" / f"{table}.parquet")
        b = pl.read_parquet(tmp_path / "streamed" / f"{table}.parquet")
        assert_frame_equal(a, b, check_exact=False, rel_tol=1e-12)
    assert_frame_equal(streamed_run.ops, held.ops)
    manifests = [
        json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("held", "streamed")
    ]
    assert manifests[0]["tables"] == manifests[1]["tables"]
    assert manifests[0]["input"] == manifests[1]["input"]
    for run in (held, streamed_run):
        assert {"read", "normalise", "attribute", "summarise", "write", "hash"} <= set(run.timings)


def test_analyse_file_lets_the_ranges_go_before_inference(gpt_export, tmp_path, monkeypatch):
    """Nothing holds the profile's ranges or API calls once the summaries are taken."""
    frames: list[weakref.ref] = []

    def load(path, kind, opened, stages, memory_gb=None):
        profile = whole_profile(path, kind, opened, stages, memory_gb)
        frames.extend(weakref.ref(f) for f in (profile.ranges, profile.api_calls))
        return profile

    alive: list[list[bool]] = []
    real_infer = flow.infer_ops

    def infer(ops):
        gc.collect()
        alive.append([ref() is not None for ref in frames])
        return real_infer(ops)

    monkeypatch.setattr(choose, "whole_profile", load)
    monkeypatch.setattr(flow, "infer_ops", infer)
    analysis = analyse_file(gpt_export, tmp_path / "out", stages=Stages(progress=False))
    assert alive == [[False, False]]
    assert analysis.profile.ranges.is_empty() and analysis.profile.api_calls.is_empty()
    assert analysis.profile.ops.height == analysis.store.rows > 0


def test_one_process_at_a_time_gives_the_tables_of_the_whole(gpt_export, tmp_path):
    """An export too large for the memory budget is attributed process by process:
    every summary identical, the same OPS rows (numbered process by process)."""
    quiet = Stages(progress=False)
    whole = analyse_file(gpt_export, tmp_path / "whole", stages=quiet)
    split = analyse_file(gpt_export, tmp_path / "split", stages=quiet, memory_gb=1e-6)
    assert whole.profile.meta_value("processes_read_apart") is None
    assert split.profile.meta_value("processes_read_apart") == "2"
    assert isinstance(split.store, OpsFile)
    for table in (*TABLES[1:], "overlap", "by_inferred_block"):
        a = pl.read_parquet(tmp_path / "whole" / f"{table}.parquet")
        b = pl.read_parquet(tmp_path / "split" / f"{table}.parquet")
        assert_frame_equal(a, b, check_exact=False, rel_tol=1e-12)
    ids = ["op_id", "range_id", "other_thread_range_id"]
    order = ["pid", "kind", "correlation_id", "start_ns", "device_id"]
    a, b = (pl.read_parquet(tmp_path / d / "ops.parquet") for d in ("whole", "split"))
    assert_frame_equal(a.drop(ids).sort(order), b.drop(ids).sort(order))
    assert b["op_id"].is_unique().all() and b["op_id"].is_sorted()
    spans = b.group_by("pid").agg(lo=pl.col("range_id").min(), hi=pl.col("range_id").max())
    assert spans.height == 2 and spans["hi"].min() < spans["lo"].max()  # one after the other
    # The same idle gaps; their kinds need the API calls, which are not kept (docs/waits.md).
    gap = ["device_id", "stream_id", "step", "start_ns", "end_ns", "dur_ns"]
    a, b = (pl.read_parquet(tmp_path / d / "idle.parquet").select(gap) for d in ("whole", "split"))
    assert a.height > 0
    assert_frame_equal(a.sort(gap, nulls_last=True), b.sort(gap, nulls_last=True))
    meta = [json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("whole", "split")]
    for key in ("cuda_launch_calls", "capture_start_ns", "capture_end_ns", "ranges_open_at_end"):
        assert meta[0]["report_meta"][key] == meta[1]["report_meta"][key], key


def test_small_exports_are_read_whole_and_large_ones_apart(gpt_export, tmp_path):
    single = write_export(tmp_path / "one.sqlite", bulk_tables(300))
    assert choice(gpt_export, memory_gb=None) == Choice(WHOLE)  # fits in memory
    # Over the budget: a process at a time, each whole where its share fits ...
    need = expected_bytes(gpt_export)
    assert choice(gpt_export, memory_gb=0.6 * need / 1e9) == Choice(BY_PROCESS, (4100, 4101))
    # ... else each in time windows too.
    apart = choice(gpt_export, memory_gb=0.3 * need / 1e9)
    assert apart == Choice(BY_PROCESS, (4100, 4101), 4, (4, 4))
    assert choice(single, memory_gb=1e-6).how == BY_WINDOW  # one process: in time windows


def test_rows_held_in_chunks_equal_those_held_whole(gpt_export):
    """The in-memory sink fed many chunks: the same rows, summaries and inference."""
    report = load_profile(gpt_export)
    whole = analyse(report)
    chunks = flow.flow(choose.whole(report), lambda _: HoldOps(chunk_rows=333), Settings(BUILTIN))
    assert chunks.store.frame.n_chunks() > 1 and whole.store.frame.n_chunks() == 1
    assert_frame_equal(chunks.ops, whole.ops)
    for name, table in whole.summaries.tables().items():
        assert_frame_equal(chunks.summaries.tables()[name], table, check_exact=False, rel_tol=1e-12)
    assert whole.inferred is not None and chunks.inferred is not None
    for name, table in whole.inferred.tables().items():
        assert_frame_equal(chunks.inferred.tables()[name], table)
    assert chunks.manifest == whole.manifest


def test_the_benchmark_sql_engine_agrees_per_range(gpt_export, tmp_path):
    analyse_file(gpt_export, tmp_path / "out", stages=Stages(progress=False))
    timings = sql_engine.run(gpt_export, tmp_path / "sql")
    assert timings["seconds"] > 0
    ours = compare.nsysmap_totals(tmp_path / "out" / "ops.parquet")
    theirs = compare.sql_totals(tmp_path / "sql" / "sql_totals.parquet", gpt_export)
    assert (
        ours["ops"].sum()
        == theirs["ops"].sum()
        == pl.read_parquet(tmp_path / "out" / "ops.parquet").height
    )
    assert ours.height > 1000
    assert compare.same_totals(ours, theirs)
