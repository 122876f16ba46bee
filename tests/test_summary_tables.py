"""The summary-table registry: one declaration per table is all the summariser needs.

The worked example of docs/architecture.md ("Adding a summary table"), a table
of GPU time per stream, is declared here and nowhere else, and must come out
of the summariser summed block by block like the built-in tables.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from nsysmap import NestedProfile, attribute, load_profile
from nsysmap.core import schemas
from nsysmap.core.errors import TotalsMismatch
from nsysmap.output.writer import write_outputs
from nsysmap.summaries.conservation import check_conservation, input_totals
from nsysmap.summaries.summarise import (
    GROUPED,
    SUMMARY_TABLES,
    Aggregate,
    SummaryTable,
    combine_summaries,
    partial_summaries,
    summarise,
)


class NoOps:
    def place(self, folder: Path) -> None:
        """No ops.parquet: only the summary tables are written."""


SAMPLE = Path(__file__).resolve().parents[1] / "sample_reports" / "gpt2_tiny_train.sqlite"
BY_STREAM = schemas.declare(
    {
        "device_id": pl.Int64,
        "stream_id": pl.Int64,
        **{"ops": pl.Int64, "time_ns": pl.Int64, "time_share": pl.Float64},
        "max_ns": pl.Int64,
    }
)
STREAMS = SummaryTable(
    "by_stream", BY_STREAM, ("stream_id",), {"max_ns": Aggregate(pl.col("dur_ns").max(), "max")}
)


@pytest.fixture(scope="module")
def profile() -> NestedProfile:
    return load_profile(SAMPLE)


@pytest.fixture(scope="module")
def ops(profile: NestedProfile) -> pl.DataFrame:
    return attribute(profile)


def test_every_table_is_declared_once_with_columns_its_schema_has():
    names = [t.name for t in SUMMARY_TABLES]
    assert len(names) == len(set(names))
    for table in SUMMARY_TABLES:
        assert set(table.keys) | set(table.extra) <= set(table.schema), table.name
        if table.source == GROUPED:  # grouped from the attributed OPS rows
            assert set(table.keys) <= set(schemas.OPS), table.name


def test_a_table_declared_once_is_summed_block_by_block(ops):
    tables = (*SUMMARY_TABLES, STREAMS)
    whole = combine_summaries([partial_summaries(ops, tables)], tables=tables)
    half = ops.height // 2
    blocks = [partial_summaries(block, tables) for block in (ops[:half], ops[half:])]
    split = combine_summaries(blocks, tables=tables)
    assert list(whole.tables()) == [t.name for t in tables]
    assert_frame_equal(split.by_stream, whole.by_stream)
    by_stream = whole.by_stream
    assert by_stream.schema == BY_STREAM
    expected = ops.group_by("device_id", "stream_id").agg(
        pl.len().cast(pl.Int64).alias("ops"), pl.col("dur_ns").max().alias("max_ns")
    )
    got = by_stream.select("device_id", "stream_id", "ops", "max_ns")
    assert_frame_equal(got, expected, check_row_order=False)
    assert by_stream["time_ns"].sum() == ops["dur_ns"].sum()
    assert by_stream["time_share"].sum() == pytest.approx(1.0)


def test_the_conservation_check_reads_which_tables_partition_gpu_time(profile, ops):
    summaries = summarise(ops, profile.ranges)
    totals = input_totals(ops.select("device_id", "dur_ns"))
    # overlap has no ops nor time_ns to add up: read as a partition, it would fail
    check_conservation(totals, summaries, ops, ops.height)
    assert not next(t for t in SUMMARY_TABLES if t.name == "overlap").partition
    short = summaries.by_category.with_columns(pl.col("time_ns") - 1)
    with pytest.raises(TotalsMismatch, match="by_category"):
        check_conservation(totals, summaries.replaced(by_category=short), ops, ops.height)


def test_summaries_read_their_tables_by_name(ops):
    summaries = summarise(ops)
    assert summaries.by_phase is summaries.tables()["by_phase"]
    with pytest.raises(AttributeError, match="no table"):
        _ = summaries.by_nothing
    with pytest.raises(KeyError):
        summaries.replaced(by_nothing=summaries.by_phase)


def test_the_writer_writes_summary_tables_only_in_their_declared_schema(ops, tmp_path):
    by_phase = summarise(ops).by_phase
    out = write_outputs({"by_phase": by_phase, "x": by_phase[:1]}, {}, tmp_path / "ok", ops=NoOps())
    assert pl.read_parquet(out / "by_phase.parquet").schema == schemas.BY_PHASE
    undeclared = by_phase.with_columns(pl.lit(1).alias("extra_ns"))
    with pytest.raises(schemas.SchemaMismatch, match="by_phase"):
        write_outputs({"by_phase": undeclared}, {}, tmp_path / "bad", ops=NoOps())
    assert not (tmp_path / "bad" / "by_phase.parquet").exists()
