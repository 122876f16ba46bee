"""The GPT-2-like export generator: shape, order, ids and reproducibility."""

from __future__ import annotations

import sqlite3

import polars as pl
import pytest

from devtools.synth.bulk import write_export
from devtools.synth.tile import STEPS_PER_CHUNK, gpt_tables
from nsysmap.read.nsys.nsys_sqlite import read_sqlite


def _rows(path, sql: str) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchall()


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return write_export(tmp_path_factory.mktemp("g") / "gpt.sqlite", gpt_tables(3000, seed=7))


def test_two_processes_on_two_gpus_with_a_backward_thread(export):
    report = read_sqlite(export)
    ops = report.ops
    assert set(ops["device_id"]) == {0, 1} and ops["pid"].n_unique() == 2
    assert dict(ops.group_by("kind").len().iter_rows()).keys() == {"kernel", "memcpy", "memset"}
    threads = report.ranges.group_by("pid").agg(pl.col("tid").n_unique())
    assert threads["tid"].to_list() == [2, 2]
    names = report.ranges["name"]
    backward = report.ranges.filter(names.str.starts_with("nsysmap:bwd:"))
    forward = report.ranges.filter(names.str.starts_with("nsysmap:fwd:"))
    assert backward.height and set(backward["tid"]).isdisjoint(set(forward["tid"]))
    assert names.str.contains(r"^aten::\w+, seq = \d+, op_id = \d+").sum() > 0
    assert names.str.contains("stashed seq = ", literal=True).sum() > 0
    assert ops.filter(pl.col("name").str.starts_with("ncclDevKernel")).height > 0
    # about three ranges per kernel
    assert 2.5 < report.ranges.height / (ops["kind"] == "kernel").sum() < 3.5


def test_rows_are_in_start_order_with_nsys_id_encodings(export):
    for table in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
        starts = [r[0] for r in _rows(export, f"SELECT start FROM {table} ORDER BY rowid")]
        assert starts == sorted(starts), table
    pids = _rows(
        export, "SELECT DISTINCT (globalPid >> 24) & 16777215 FROM CUPTI_ACTIVITY_KIND_KERNEL"
    )
    assert len(pids) == 2
    registered = _rows(
        export, "SELECT count(*) FROM NVTX_EVENTS WHERE text IS NULL AND textId IS NOT NULL"
    )
    domains = _rows(export, "SELECT DISTINCT text FROM NVTX_EVENTS WHERE eventType = 75")
    assert registered[0][0] > 0 and {d[0] for d in domains} == {"nsysmap", "NCCL"}
    unmatched = _rows(
        export,
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r"
        " ON r.correlationId = k.correlationId AND r.globalTid >> 24 = k.globalPid >> 24"
        " WHERE r.start IS NULL",
    )
    assert unmatched == [(0,)]


@pytest.mark.slow
def test_same_seed_same_export_other_seed_other_timings(tmp_path):
    a = write_export(tmp_path / "a.sqlite", gpt_tables(1000, seed=1))
    b = write_export(tmp_path / "b.sqlite", gpt_tables(1000, seed=1))
    c = write_export(tmp_path / "c.sqlite", gpt_tables(1000, seed=2))
    query = "SELECT start, end, text, textId FROM NVTX_EVENTS ORDER BY rowid"
    assert _rows(a, query) == _rows(b, query)
    assert _rows(a, query) != _rows(c, query)
    assert len(_rows(a, query)) == len(_rows(c, query))


@pytest.mark.slow
def test_chunked_tables_write_like_whole_frames(tmp_path, monkeypatch):
    monkeypatch.setattr("devtools.synth.tile.STEPS_PER_CHUNK", 1)
    chunked = write_export(tmp_path / "chunked.sqlite", gpt_tables(2000, seed=4))
    tables = gpt_tables(2000, seed=4)
    whole = {
        k: pl.concat(list(v)) if not isinstance(v, pl.DataFrame) else v for k, v in tables.items()
    }
    single = write_export(tmp_path / "whole.sqlite", whole)
    for table in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMSET"):
        query = f"SELECT * FROM {table} ORDER BY rowid"
        assert _rows(chunked, query) == _rows(single, query), table
    assert STEPS_PER_CHUNK > 1
