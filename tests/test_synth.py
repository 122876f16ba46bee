"""The synthetic export writer and builder, checked with plain sqlite3."""

from __future__ import annotations

import sqlite3

import polars as pl
import pytest

from devtools.synth import (
    NS_PER_MS,
    SynthExport,
    bulk_tables,
    global_pid,
    global_tid,
    known_columns,
    write_export,
)
from tests.corpus import CORPUS, connect, needs_corpus

NEWEST = "fastvideo_training_mfu_h100x2_before.sqlite"  # nsys 2026.2
NEWEST_GPU_INFO = "torch_minimal_zeros_sum_rtx3080.sqlite"  # 2026.1: has TARGET_INFO_GPU


def rows(path, query, *params):
    with connect(path) as conn:
        return conn.execute(query, params).fetchall()


def table_info(path, table):
    """(name, declared type, not null) per column, as SQLite reports them."""
    return [(r[1].decode(), r[2].decode(), r[3]) for r in rows(path, f"PRAGMA table_info({table})")]


def tables_of(path):
    return {r[0].decode() for r in rows(path, "SELECT name FROM sqlite_master WHERE type='table'")}


# ------------------------------------------------------------- write_export
@pytest.mark.corpus
@needs_corpus
@pytest.mark.parametrize(
    "table",
    [
        "StringIds",
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "NVTX_EVENTS",
        "ThreadNames",
        "META_DATA_EXPORT",
        "META_DATA_CAPTURE",
        "ENUM_NSYS_EVENT_TYPE",
        "ENUM_CUDA_MEMCPY_OPER",
        "TARGET_INFO_GPU",
    ],
)
def test_tables_have_the_columns_of_the_newest_real_exports(tmp_path, table):
    real = CORPUS / (NEWEST_GPU_INFO if table == "TARGET_INFO_GPU" else NEWEST)
    path = write_export(tmp_path / "x.sqlite", {table: None})
    assert table_info(path, table) == table_info(real, table)


def test_known_columns_flags():
    kernel = {c.name: c for c in known_columns("CUPTI_ACTIVITY_KIND_KERNEL")}
    assert kernel["start"].not_null and kernel["start"].sql_type == "INTEGER"
    assert not kernel["mangledName"].not_null
    assert known_columns("StringIds")[0].primary_key
    assert known_columns("NO_SUCH_TABLE") == []


def test_missing_not_null_columns_get_defaults_and_nullable_ones_null(tmp_path):
    frame = pl.DataFrame({"start": [5], "end": [9], "eventClass": [0], "nameId": [3]})
    path = write_export(tmp_path / "x.sqlite", {"CUPTI_ACTIVITY_KIND_RUNTIME": frame})
    got = rows(path, "SELECT start, end, returnValue, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    assert got == [(5, 9, 0, None)]


def test_only_given_tables_are_written(tmp_path):
    path = write_export(
        tmp_path / "x.sqlite", {"StringIds": pl.DataFrame({"id": [0], "value": ["a"]})}
    )
    assert tables_of(path) == {"StringIds"}


def test_exact_columns_and_foreign_columns_and_tables(tmp_path):
    gpu = pl.DataFrame({"deviceId": [0], "name": ["old GPU"]})
    kernel = pl.DataFrame({"start": [1], "end": [2], "kernel_name": ["foreign"]})
    extra = pl.DataFrame({"x": [1.5], "label": ["y"]})
    path = write_export(
        tmp_path / "x.sqlite",
        {"TARGET_INFO_GPU": gpu, "CUPTI_ACTIVITY_KIND_KERNEL": kernel, "EXTRAP_THING": extra},
        exact_columns={"TARGET_INFO_GPU"},
    )
    assert table_info(path, "TARGET_INFO_GPU") == [("deviceId", "INTEGER", 0), ("name", "TEXT", 0)]
    kernel_columns = table_info(path, "CUPTI_ACTIVITY_KIND_KERNEL")
    assert kernel_columns[-1] == ("kernel_name", "TEXT", 0)
    assert len(kernel_columns) == len(known_columns("CUPTI_ACTIVITY_KIND_KERNEL")) + 1
    assert table_info(path, "EXTRAP_THING") == [("x", "REAL", 0), ("label", "TEXT", 0)]


def test_binary_values_in_text_columns_are_stored_as_text(tmp_path):
    frame = pl.DataFrame({"id": [0, 1], "value": [b"ok", b"Gei\xdf"]})
    path = write_export(tmp_path / "x.sqlite", {"StringIds": frame})
    assert rows(path, "SELECT typeof(value), value FROM StringIds ORDER BY id") == [
        (b"text", b"ok"),
        (b"text", b"Gei\xdf"),
    ]


def test_write_replaces_an_existing_file(tmp_path):
    target = tmp_path / "x.sqlite"
    target.write_bytes(b"old content")
    write_export(target, {"StringIds": None})
    assert tables_of(target) == {"StringIds"}


def test_rejects_identifiers_that_are_not_plain_names(tmp_path):
    with pytest.raises(ValueError, match="identifier"):
        write_export(tmp_path / "x.sqlite", {'bad"; DROP': None})


# ------------------------------------------------------------------ ids
def test_id_encoding_round_trips_through_the_nsys_formula():
    gtid = global_tid(0xABCDEF, 0x123456)
    assert (gtid >> 24) & 0xFFFFFF == 0xABCDEF and gtid & 0xFFFFFF == 0x123456
    assert global_pid(77) == global_tid(77, 0) and (global_pid(77) >> 24) & 0xFFFFFF == 77


# -------------------------------------------------------------- builder
def test_builder_times_are_milliseconds_in_ns_and_strings_interned(tmp_path):
    b = SynthExport()
    b.launch(1, 2, 2, 3, corr=7)
    b.kernel(1, 0, 7, 4, 6.5, corr=7, name="void gemm()", short_name="gemm")
    b.kernel(1, 0, 7, 7, 8, corr=8, name="void gemm()", short_name="gemm")
    path = b.write(tmp_path / "x.sqlite")
    kernels = rows(
        path,
        "SELECT k.start, k.end, k.globalPid, d.value, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k"
        " JOIN StringIds d ON d.id = k.demangledName JOIN StringIds s ON s.id = k.shortName",
    )
    assert kernels[0] == (4 * NS_PER_MS, 6_500_000, global_pid(1), b"void gemm()", b"gemm")
    assert rows(path, "SELECT COUNT(*) FROM StringIds WHERE value = 'void gemm()'") == [(1,)]
    launch = rows(
        path, "SELECT start, end, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME"
    )
    assert launch == [(2 * NS_PER_MS, 3 * NS_PER_MS, global_tid(1, 2), 7)]


def test_builder_twin_rows_copy_the_call_with_class_67_and_unversioned_name(tmp_path):
    b = SynthExport()
    b.launch(1, 1, 2, 3, corr=7, twin=True)
    path = b.write(tmp_path / "x.sqlite")
    got = rows(
        path,
        "SELECT r.eventClass, r.correlationId, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r"
        " JOIN StringIds s ON s.id = r.nameId ORDER BY r.eventClass",
    )
    assert got == [(0, 7, b"cudaLaunchKernel_v7000"), (67, 7, b"cudaLaunchKernel")]


def test_builder_nvtx_rows(tmp_path):
    b = SynthExport()
    b.range(1, 1, 0, 10, "inline")
    b.range(1, 1, 1, 2, "registered", style="textId", domain="NCCL")
    b.domain(1, "hidden", create_event=False)
    b.range(1, 1, 3, None, "hidden range", domain="hidden")
    b.range(1, 1, 4, 5, "async", event_type=60, end_tid=9)
    b.mark(1, 1, 6, "a mark")
    path = b.write(tmp_path / "x.sqlite")
    got = rows(
        path,
        "SELECT eventType, start, end, text, textId IS NOT NULL, domainId, rangeId,"
        " endGlobalTid FROM NVTX_EVENTS",
    )
    assert got == [
        (59, 0, 10 * NS_PER_MS, b"inline", 0, 0, None, None),
        (75, 0, None, b"NCCL", 0, 1, None, None),
        (59, NS_PER_MS, 2 * NS_PER_MS, None, 1, 1, None, None),
        (59, 3 * NS_PER_MS, None, b"hidden range", 0, 2, None, None),
        (60, 4 * NS_PER_MS, 5 * NS_PER_MS, b"async", 0, 0, 1, global_tid(1, 9)),
        (34, 6 * NS_PER_MS, None, b"a mark", 0, 0, None, None),
    ]


def test_builder_omit_bytes_and_foreign_columns(tmp_path):
    b = SynthExport()
    b.thread(1, 1, b"Gei\xdf")
    b.kernel(1, 0, 7, 0, 1, corr=1)
    b.range(1, 1, 0, 1, "r")
    b.column("CUPTI_ACTIVITY_KIND_KERNEL", "name", "from another tool")
    path = b.write(tmp_path / "x.sqlite", omit=("NVTX_EVENTS",))
    assert "NVTX_EVENTS" not in tables_of(path)
    assert rows(path, "SELECT name FROM CUPTI_ACTIVITY_KIND_KERNEL") == [(b"from another tool",)]
    assert rows(path, "SELECT value FROM StringIds WHERE typeof(value) = 'text'") == [
        (b"Gei\xdf",),
        (b"kernel",),
    ]


def test_builder_memcpy_memset_and_gpu(tmp_path):
    b = SynthExport()
    b.memcpy(3, 1, 5, 0, 1, corr=1, nbytes=4096, copy_kind=2)
    b.memset(3, 1, 5, 1, 2, corr=2, nbytes=64)
    b.gpu(1, "NVIDIA A100", sm_count=108, memory_bytes=40 * 2**30, compute=(8, 0))
    path = b.write(tmp_path / "x.sqlite")
    assert rows(
        path, "SELECT deviceId, streamId, bytes, copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY"
    ) == [(1, 5, 4096, 2)]
    assert rows(path, "SELECT bytes, value FROM CUPTI_ACTIVITY_KIND_MEMSET") == [(64, 0)]
    gpu = rows(path, "SELECT id, name, smCount, totalMemory, computeMajor FROM TARGET_INFO_GPU")
    assert gpu == [(1, b"NVIDIA A100", 108, 40 * 2**30, 8)]
    assert rows(path, "SELECT label FROM ENUM_CUDA_MEMCPY_OPER WHERE id = 11") == [
        (b"Unified Host-to-Device",)
    ]


# ------------------------------------------------------------------ bulk
def test_bulk_tables_nest_ranges_around_each_launch(tmp_path):
    path = write_export(tmp_path / "bulk.sqlite", bulk_tables(50, ranges_per_kernel=3))
    with sqlite3.connect(path) as conn:
        counts = [
            conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
        ]
        assert counts == [50, 50, 150]
        enclosing = conn.execute(
            "SELECT r.correlationId, COUNT(n.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r"
            " LEFT JOIN NVTX_EVENTS n ON n.globalTid = r.globalTid"
            " AND n.start <= r.start AND r.end <= n.end GROUP BY r.correlationId"
        ).fetchall()
        assert {count for _, count in enclosing} == {3}
        unmatched = conn.execute(
            "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN"
            " CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId) WHERE r.start IS NULL"
        ).fetchone()[0]
        assert unmatched == 0
        unnamed = conn.execute(
            "SELECT COUNT(*) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId"
            " WHERE n.text IS NULL AND s.value IS NULL"
        ).fetchone()[0]
        assert unnamed == 0
