"""What the passes after the parts read back: few columns of the OPS rows, small frames
of each part, and the same tables as when everything is at hand."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from devtools.synth.bulk import write_export
from devtools.synth.tile import gpt_tables
from nsysmap.core.timings import Stages
from nsysmap.flow import leftovers as kept_module
from nsysmap.flow import run_stages as flow
from nsysmap.flow.verbs import analyse_file
from nsysmap.infer.sequence import ORDER, in_order, key_expr, sequence_query, sequences
from nsysmap.infer.summary import INFER_COLUMNS, infer_ops, infer_scan
from nsysmap.output.ops_sinks import HeldOps, OpsFile

pytestmark = pytest.mark.slow  # whole flows on a synthetic export

TEXTS = {"name", "short_name", "phase", "module", "range_path", "launch_api"}
WAITS = ("idle", "stream_idle", "launch_cost")


@pytest.fixture(scope="module")
def gpt_export(tmp_path_factory: pytest.TempPathFactory):
    """Two processes, forward and backward threads, NCCL (as in tests/test_scale.py)."""
    return write_export(tmp_path_factory.mktemp("gpt") / "gpt.sqlite", gpt_tables(2000, seed=3))


@pytest.fixture(scope="module")
def synced_export(tmp_path_factory: pytest.TempPathFactory):
    """The same with synchronous copies and stream synchronisations among its calls."""
    tables = gpt_tables(2000, seed=3)
    renamed = {"cudaMemcpyAsync_v3020": "cudaMemcpy_v3020"}
    renamed["cudaEventRecord_v3020"] = "cudaStreamSynchronize_v3020"
    tables["StringIds"] = tables["StringIds"].with_columns(pl.col("value").replace(renamed))
    return write_export(tmp_path_factory.mktemp("synced") / "synced.sqlite", tables)


@pytest.fixture(scope="module")
def split(gpt_export, tmp_path_factory: pytest.TempPathFactory):
    """The export read one process at a time: the OPS rows in ops.parquet."""
    out = tmp_path_factory.mktemp("split")
    return analyse_file(gpt_export, out, stages=Stages(progress=False), memory_gb=1e-6)


def test_inference_reads_ops_parquet_a_device_at_a_time_without_names(split, monkeypatch):
    """No frame that inference collects from ops.parquet holds a text column as text, nor
    every column it reads at once, nor more than one device's rows."""
    assert isinstance(split.store, OpsFile)
    collected = _record_collects(monkeypatch)
    inferred = flow._inferred(split.store)
    monkeypatch.undo()
    rows = [f for f in collected if "op_id" in f.columns]
    assert len(rows) == 2 * 2  # two devices, two passes each
    for frame in rows:
        texts = {c for c, t in frame.schema.items() if t == pl.String}
        assert not texts & TEXTS, texts
        assert set(INFER_COLUMNS) - set(frame.columns)
        assert frame["device_id"].n_unique() == 1
    assert split.inferred is not None
    whole = infer_ops(split.store.read(INFER_COLUMNS))  # every column, every device at once
    for name, table in whole.tables().items():
        assert_frame_equal(inferred.tables()[name], table)
    assert inferred.lines(cpu=False) == whole.lines(cpu=False)


def test_one_device_read_lazily_is_inferred_as_held(split):
    ops = split.store.read(INFER_COLUMNS).filter(pl.col("device_id") == 1)
    held, scanned = infer_ops(ops), infer_scan(split.store.scan().filter(pl.col("device_id") == 1))
    for name, table in held.tables().items():
        assert_frame_equal(scanned.tables()[name], table)
    assert_frame_equal(scanned.agreement, held.agreement)


def _shuffled(n: int, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    names = ["sm80_xmma_gemm_128", "sm90_gemm_64", "elementwise_3", "elementwise_17", None]
    return pl.DataFrame(
        {
            "op_id": rng.permutation(n),
            "device_id": rng.integers(0, 2, n),
            "pid": rng.integers(0, 2, n),
            "tid": rng.integers(0, 3, n),
            "stream_id": rng.integers(0, 2, n),
            "kind": ["kernel"] * n,
            "category": rng.choice(["gemm", "elementwise", None], n).tolist(),
            "name": [names[i] for i in rng.integers(0, len(names), n)],
            "short_name": [names[i] for i in rng.integers(0, len(names), n)],
            "start_ns": rng.integers(0, 50, n),
            "launch_start_ns": rng.integers(0, 50, n),
        }
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sequences_are_sorted_and_coded_as_a_sort_of_every_op_would(seed):
    ops = _shuffled(400, seed)
    got = sequences(sequence_query(ops.lazy()).collect())
    # The definition: every op's key, ranked over all rows; the rows sorted by ORDER.
    keys = (
        ops.with_columns(_name=pl.coalesce("short_name", "name"))
        .select(
            "op_id",
            code=key_expr("category", "_name").rank("dense").cast(pl.Int64),
            order_ns=pl.coalesce("launch_start_ns", "start_ns"),
        )
        .rename({"op_id": "id"})
    )
    expected = ops.select(
        "op_id", "device_id", "pid", order_ns=pl.coalesce("launch_start_ns", "start_ns")
    ).sort(ORDER)
    assert got.select(expected.columns).equals(expected)
    codes = got.join(keys.select("id", "code"), left_on="op_id", right_on="id")
    assert codes["code"].equals(codes["code_right"], check_names=False)


def test_rows_already_in_launch_order_are_not_sorted_again(monkeypatch):
    ops = _shuffled(300, 4).with_columns(launch_start_ns=pl.col("start_ns"))
    ordered = sequence_query(ops.lazy()).collect().sort(ORDER)
    assert in_order(ordered, ORDER) and not in_order(ordered.reverse(), ORDER)
    sorts: list[int] = []
    real = pl.DataFrame.sort

    def sort(self: pl.DataFrame, *args: object, **kwargs: object) -> pl.DataFrame:
        sorts.append(self.height)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "sort", sort)
    done = sequences(ordered)
    assert sorts == []
    assert sequences(ordered.reverse()).equals(done)  # put in launch order again
    assert sorts  # by a sort (of the rows whose packed keys tie, or of all)


def test_parts_keep_for_the_waits_only_what_they_read(synced_export, tmp_path, monkeypatch):
    """Each part's synchronisations, `.item()` ranges and launch calls, slimmed: the
    waits tables equal those made from the parts' frames whole."""
    kept = _record_kept(monkeypatch)
    quiet = Stages(progress=False)
    slim = analyse_file(synced_export, tmp_path / "slim", stages=quiet, memory_gb=1e-6)
    calls, ranges, launches = kept[-1].waits_context()
    assert calls.columns == ["api_name", "pid", "tid", "start_ns", "end_ns"] and calls.height
    assert ranges.columns == ["name", "pid", "tid", "start_ns", "end_ns"]
    assert launches is not None and launches.height == slim.store.rows
    named = launches["launch_api"].drop_nulls()
    assert named.len() and named.str.contains(r"^cudaMemcpy_v\d+$").all()
    # The same run keeping the parts' frames as they are.
    monkeypatch.setattr(kept_module, "slim_launches", lambda launches: launches)
    monkeypatch.setattr(
        kept_module, "host_waits_of", lambda part: (part.api_calls.clone(), part.ranges.clone())
    )
    full = analyse_file(synced_export, tmp_path / "full", stages=quiet, memory_gb=1e-6)
    assert (slim.summaries.waits["idle"]["kind"] == "sync").any()
    for name in WAITS:
        assert full.summaries.waits[name].height > 0
        assert slim.summaries.waits[name].equals(full.summaries.waits[name]), name


def test_overlap_and_waits_a_device_at_a_time_equal_those_of_all_rows(
    synced_export, tmp_path, monkeypatch
):
    kept = _record_kept(monkeypatch)
    run = analyse_file(synced_export, tmp_path, stages=Stages(progress=False), memory_gb=1e-6)
    context = kept[-1].waits_context()
    collected = _record_collects(monkeypatch)
    streamed = flow._per_device(run.summaries, run.store, context)
    monkeypatch.undo()
    read = [f for f in collected if "device_id" in f.columns and "start_ns" in f.columns]
    assert read and all(f["device_id"].n_unique() <= 1 for f in read)
    held = flow._per_device(run.summaries, HeldOps(run.store.read()), context)
    overlap = held.tables()["overlap"]
    assert overlap["comm_ops"].sum() > 0 and overlap["device_id"].n_unique() == 2
    assert streamed.tables()["overlap"].equals(overlap)
    for name in WAITS:
        assert held.waits[name]["device_id"].n_unique() == 2
        assert streamed.waits[name].equals(held.waits[name]), name


def _record_collects(monkeypatch: pytest.MonkeyPatch) -> list[pl.DataFrame]:
    """Every frame a LazyFrame collects from now on (until monkeypatch.undo())."""
    collected: list[pl.DataFrame] = []
    real = pl.LazyFrame.collect

    def recording(self: pl.LazyFrame, *args: object, **kwargs: object) -> pl.DataFrame:
        frame = real(self, *args, **kwargs)
        collected.append(frame)
        return frame

    monkeypatch.setattr(pl.LazyFrame, "collect", recording)
    return collected


def _record_kept(monkeypatch: pytest.MonkeyPatch) -> list[kept_module.Leftovers]:
    """The flow's Leftovers, once per part it takes in (until monkeypatch.undo())."""
    kept: list[kept_module.Leftovers] = []
    real_add = kept_module.Leftovers.add

    def add(self: kept_module.Leftovers, profile, ranges_summary) -> None:
        real_add(self, profile, ranges_summary)
        kept.append(self)

    monkeypatch.setattr(kept_module.Leftovers, "add", add)
    return kept
