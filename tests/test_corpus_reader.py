"""The reader over the 13 real nsys exports (2021 .. 2026.2) of ../shared/corpus/nsys
(GPU totals also over the nsys exports of ../shared/corpus/real).

Expected values come from plain SQL on the raw tables (tests/corpus.py) or
from the corpus catalogue, never from the reader's own output.
"""

from __future__ import annotations

import polars as pl
import pytest

from nsysmap.core import schemas
from nsysmap.core.errors import ExitCode, NoGpuData
from nsysmap.read.nsys.nsys_sqlite import read_sqlite
from tests.corpus import (
    NO_GPU_FILES,
    all_export_files,
    catalogue,
    connect,
    corpus_files,
    corpus_path,
    independent_gpu_totals,
    needs_corpus,
)

pytestmark = [pytest.mark.corpus, needs_corpus]
ENTRIES = {entry["file"]: entry for entry in catalogue()}
GPU_FILES = [name for name in corpus_files() if name not in NO_GPU_FILES]


def scalar(path, query):
    with connect(path) as conn:
        return conn.execute(query).fetchone()[0]


def per_device(report) -> dict[int, tuple[int, int]]:
    totals = report.ops.group_by("device_id").agg(pl.len(), pl.col("dur_ns").sum())
    return {device: (count, total) for device, count, total in totals.rows()}


@pytest.mark.parametrize("name", [n for n in all_export_files() if n not in NO_GPU_FILES])
def test_gpu_ops_match_independent_sql_totals(name):
    path = corpus_path(name)
    report = read_sqlite(path)
    assert per_device(report) == independent_gpu_totals(path)
    ops = report.ops
    assert ops.schema == schemas.PROFILE_OPS
    assert ops["name"].null_count() == 0 and ops["op_id"].n_unique() == ops.height
    assert (ops["dur_ns"] >= 0).all()


@pytest.mark.parametrize("name", GPU_FILES)
def test_counts_and_versions_match_the_catalogue(name):
    entry = ENTRIES[name]
    report = read_sqlite(corpus_path(name))
    facts = dict(report.meta.rows())
    assert facts.get("nsys_version") == entry["nsys_version"]
    assert facts.get("export_schema_version") == entry["export_schema_version"]
    kernels = report.ops.filter(kind="kernel").group_by("device_id").len()
    assert sorted(kernels.rows()) == sorted(map(tuple, entry["kernels"]["devices"]))
    nvtx = entry["nvtx"]
    assert report.ranges.height == (nvtx["range_count"] if nvtx else 0)
    if nvtx:
        assert facts["ranges_open_at_end"] == str(nvtx["ranges_without_end"])
        assert report.ranges["name"].null_count() == 0


@pytest.mark.parametrize("name", GPU_FILES)
def test_every_kernel_finds_at_most_one_launch(name):
    """After twin removal no (pid, correlation id) names two API calls."""
    report = read_sqlite(corpus_path(name))
    keys = report.api_calls.drop_nulls("correlation_id").select("pid", "correlation_id")
    assert keys.is_unique().all()
    matched = report.ops.filter(kind="kernel").join(keys, on=["pid", "correlation_id"])
    assert matched.height == ENTRIES[name]["kernels"]["matched_to_runtime_by_correlationId"]


@pytest.mark.parametrize("name", NO_GPU_FILES)
def test_exports_without_gpu_activity(name):
    path = corpus_path(name)
    with pytest.raises(NoGpuData) as info:
        read_sqlite(path)
    message = str(info.value)
    assert info.value.exit_code == ExitCode.NO_GPU_DATA and "\n" not in message
    assert "--trace=cuda" in message
    report = read_sqlite(path, require_gpu=False)
    assert report.ops.is_empty()


def test_wsl2_capture_reports_its_launch_count():
    path = corpus_path("qcu_mpi_python_wsl2_no_kernel_table.sqlite")
    launches = scalar(
        path,
        "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId"
        " WHERE s.value LIKE 'cudaLaunchKernel%' OR s.value LIKE 'cuLaunchKernel%'",
    )
    with pytest.raises(NoGpuData, match=f"records {launches} CUDA kernel launches"):
        read_sqlite(path)


def test_backtrace_twins_removed_in_pipit_saxpy():
    path = corpus_path("pipit_saxpy_mpi_cuda_rank0_perlmutter.sqlite")
    report = read_sqlite(path)
    real = scalar(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass != 67")
    assert report.api_calls.height == real
    assert not report.api_calls["api_name"].is_in(["cudaMalloc", "cudaLaunchKernel"]).any()
    twins = scalar(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass = 67")
    assert dict(report.meta.rows())["backtrace_twin_rows"] == str(twins)


def test_two_gpus_two_processes_in_fastvideo():
    path = corpus_path("fastvideo_training_mfu_h100x2_before.sqlite")
    report = read_sqlite(path)
    totals = independent_gpu_totals(path)
    assert set(totals) == {0, 1} and per_device(report) == totals
    pids = report.ops.group_by("device_id").agg(pl.col("pid").unique())
    assert sorted(len(p) for p in pids["pid"]) == [1, 1]  # one process per GPU
    assert report.ops["pid"].n_unique() == 2


def test_domain_names_where_create_events_exist():
    saxpy = read_sqlite(corpus_path("pipit_saxpy_mpi_cuda_rank0_perlmutter.sqlite"))
    assert set(saxpy.ranges["domain"].drop_nulls()) == {"MPI"}
    assert "MPI_Send" in saxpy.ranges.filter(domain="MPI")["name"].to_list()
    trt = read_sqlite(
        corpus_path("centerformer_poolformer_trt_nvtx_only.sqlite"), require_gpu=False
    )
    by_domain = dict(trt.ranges.group_by("domain").len().rows())
    assert by_domain == {None: 1128, "TensorRT": 18424, "myelin-exec": 2444}
    assert set(trt.ranges.filter(domain="myelin-exec")["kind"]) == {"start_end"}


def test_domain_without_create_event_stays_unnamed_in_fastvideo():
    path = corpus_path("fastvideo_training_mfu_h100x2_before.sqlite")
    in_domain_1 = scalar(path, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE domainId = 1")
    ranges = read_sqlite(path).ranges
    assert in_domain_1 > 0 and ranges["domain"].null_count() == ranges.height
    registered = scalar(
        path, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE text IS NULL AND textId IS NOT NULL"
    )
    assert registered == in_domain_1  # NCCL ranges: named by registered string only
    assert ranges["name"].null_count() == 0


@pytest.mark.parametrize(
    "name",
    [
        "extrap_concurrent_streams_nvtx_windows.sqlite",
        "centerformer_baseline_pytorch_nvtx_only.sqlite",
    ],
)
def test_latin1_and_binary_text_files_read(name):
    report = read_sqlite(corpus_path(name), require_gpu=False)
    assert report.ranges.height == ENTRIES[name]["nvtx"]["range_count"]
    assert dict(report.meta.rows())["nsys_version"] == ENTRIES[name]["nsys_version"]


def test_devices_listed_in_target_info():
    nvfuser = read_sqlite(corpus_path("nvfuser_gtest_hopper_matmul_h100.sqlite")).devices
    assert nvfuser.height == 8 and set(nvfuser["compute_capability"]) == {"9.0"}
    fastvideo = read_sqlite(corpus_path("fastvideo_training_mfu_h100x2_before.sqlite"))
    assert fastvideo.devices.is_empty()  # 2026.2 time-sliced capture: no GPU info table
