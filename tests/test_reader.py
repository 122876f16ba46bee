"""The nsys SQLite reader on small synthetic exports with hand-checkable timings."""

from __future__ import annotations

import os
import shutil
import sqlite3

import hypothesis.strategies as st
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings

from devtools.synth import NS_PER_MS, SynthExport, bulk_tables, global_tid, write_export
from nsysmap.core import schemas
from nsysmap.core.errors import ExitCode, InputNotFound, NoGpuData, NotAProfile
from nsysmap.flow.verbs import load_profile
from nsysmap.read.nsys.nsys_sqlite import read_sqlite
from tests.corpus import independent_gpu_totals

MS = NS_PER_MS
KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"


def meta(report) -> dict[str, str]:
    return dict(report.meta.rows())


def training_step() -> SynthExport:
    """One thread launching a kernel, a copy and a memset inside a step range.

    ms   0    1    2    3    4    5    6    7    8    9   10
    cpu  |------------------ step 0 -----------------------|
              |launch|         |copy call|
    gpu                 |-gemm-|           |HtoD|memset|
    """
    b = SynthExport()
    b.thread(10, 11, "python")
    b.range(10, 11, 0, 10, "step 0")
    b.launch(10, 11, 1, 2, corr=1)
    b.kernel(
        10,
        0,
        7,
        3,
        5,
        corr=1,
        name="void gemm<float>(int)",
        short_name="gemm",
        grid=(4, 2, 1),
        block=(128, 1, 1),
    )
    b.launch(10, 11, 5, 6, corr=2, api="cudaMemcpyAsync_v3020")
    b.memcpy(10, 0, 7, 7, 8, corr=2, nbytes=4096, copy_kind=1)
    b.memset(10, 0, 7, 8, 9, corr=3, nbytes=64)
    b.gpu(0, "NVIDIA H100", sm_count=132, memory_bytes=80 * 2**30, compute=(9, 0))
    return b


@pytest.fixture
def step_report(tmp_path):
    return read_sqlite(training_step().write(tmp_path / "step.sqlite"))


# ------------------------------------------------------------- GPU ops
def test_frames_conform_to_the_declared_schemas(step_report):
    assert step_report.ops.schema == schemas.PROFILE_OPS
    assert step_report.api_calls.schema == schemas.API_CALLS
    assert step_report.ranges.schema == schemas.RANGES
    assert step_report.threads.schema == schemas.THREADS
    assert step_report.devices.schema == schemas.DEVICES


def test_gpu_ops_carry_times_ids_and_names(step_report):
    ops = step_report.ops.sort("start_ns")
    assert ops["kind"].to_list() == ["kernel", "memcpy", "memset"]
    assert ops["start_ns"].to_list() == [3 * MS, 7 * MS, 8 * MS]
    assert ops["dur_ns"].to_list() == [2 * MS, MS, MS]
    assert ops["name"].to_list() == ["void gemm<float>(int)", "[CUDA memcpy HtoD]", "[CUDA memset]"]
    assert ops["short_name"][0] == "gemm"
    assert ops["correlation_id"].to_list() == [1, 2, 3]
    assert set(ops["pid"]) == {10} and set(ops["device_id"]) == {0} and set(ops["stream_id"]) == {7}
    kernel = ops.row(0, named=True)
    grid = (kernel["grid_x"], kernel["grid_y"], kernel["grid_z"], kernel["block_x"])
    assert grid == (4, 2, 1, 128) and kernel["bytes"] is None
    assert ops["bytes"].to_list()[1:] == [4096, 64]
    assert ops["op_id"].n_unique() == 3


def test_ids_decode_process_and_thread_from_global_ids(tmp_path):
    b = SynthExport()
    b.thread(0xABCDEF, 0x123456, "worker")
    b.launch(0xABCDEF, 0x123456, 0, 1, corr=5)
    b.kernel(0xABCDEF, 2, 3, 1, 2, corr=5)
    report = read_sqlite(b.write(tmp_path / "x.sqlite"))
    assert report.ops["pid"].to_list() == [0xABCDEF]
    assert report.api_calls.select("pid", "tid").row(0) == (0xABCDEF, 0x123456)
    assert report.threads.rows() == [(0xABCDEF, 0x123456, "worker")]


def test_op_and_range_ids_are_deterministic(tmp_path):
    path = training_step().write(tmp_path / "x.sqlite")
    first, second = read_sqlite(path), read_sqlite(path)
    assert first.ops.equals(second.ops) and first.ranges.equals(second.ranges)


def _kernel_without(tmp_path, *dropped: str) -> str:
    b = SynthExport()
    b.kernel(1, 0, 7, 0, 1, corr=1, name="void k<int>()", short_name="k")
    tables = b.tables()
    tables[KERNEL_TABLE] = tables[KERNEL_TABLE].drop(*dropped)
    path = write_export(tmp_path / "x.sqlite", tables, exact_columns={KERNEL_TABLE})
    return read_sqlite(path).ops["name"][0]


def test_kernel_name_falls_back_to_short_then_mangled_name(tmp_path):
    assert _kernel_without(tmp_path, "mangledName") == "void k<int>()"
    assert _kernel_without(tmp_path, "demangledName") == "k"
    b = SynthExport()
    b.kernel(1, 0, 7, 0, 1, corr=1)
    mangled = b.string_id("_Z1kv")
    tables = b.tables()
    kernel = tables[KERNEL_TABLE].drop("demangledName", "shortName")
    tables[KERNEL_TABLE] = kernel.with_columns(mangledName=pl.lit(mangled, pl.Int64))
    path = write_export(tmp_path / "y.sqlite", tables, exact_columns={KERNEL_TABLE})
    assert read_sqlite(path).ops["name"].to_list() == ["_Z1kv"]


def test_a_foreign_name_column_in_the_kernel_table_is_ignored(tmp_path):
    b = training_step()
    b.column(KERNEL_TABLE, "name", "not the kernel name")
    b.table("EXTRAP_GPU_IDLE", pl.DataFrame({"start": [1], "duration": [2.5]}))
    report = read_sqlite(b.write(tmp_path / "x.sqlite"))
    assert "void gemm<float>(int)" in report.ops["name"].to_list()


@pytest.mark.parametrize("with_enum", [True, False])
def test_memcpy_names_from_the_enum_or_the_built_in_table(tmp_path, with_enum):
    b = SynthExport()
    for corr, kind in enumerate([1, 2, 8, 10, 11, 0, 42]):
        b.memcpy(1, 0, 7, corr, corr + 1, corr=corr, copy_kind=kind)
    omit = () if with_enum else ("ENUM_CUDA_MEMCPY_OPER",)
    names = read_sqlite(b.write(tmp_path / "x.sqlite", omit=omit)).ops["name"].to_list()
    assert names == [
        "[CUDA memcpy HtoD]",
        "[CUDA memcpy DtoH]",
        "[CUDA memcpy DtoD]",
        "[CUDA memcpy PtoP]",
        "[CUDA memcpy Unified HtoD]",
        "[CUDA memcpy Unknown]",
        "[CUDA memcpy kind 42]",
    ]


def test_the_enum_wins_over_the_built_in_table(tmp_path):
    b = SynthExport()
    b.memcpy(1, 0, 7, 0, 1, corr=1, copy_kind=1)
    b.memcpy(1, 0, 7, 1, 2, corr=2, copy_kind=14)
    enum = pl.DataFrame(
        {"id": [1, 14], "name": ["CUDA_MEMCPY_KIND_DTOH", "CUDA_MEMCPY_KIND_UVM_PTOD"]}
    )
    path = write_export(tmp_path / "x.sqlite", b.tables() | {"ENUM_CUDA_MEMCPY_OPER": enum})
    names = read_sqlite(path).ops["name"].to_list()
    assert names == ["[CUDA memcpy DtoH]", "[CUDA memcpy Unified PtoD]"]


# ------------------------------------------------------------ API calls
def test_backtrace_twins_are_dropped(tmp_path):
    b = SynthExport()
    b.launch(1, 1, 0, 1, corr=1, twin=True)
    b.launch(1, 1, 2, 3, corr=2, api="cudaMalloc_v3020", twin=True)
    b.kernel(1, 0, 7, 1, 2, corr=1)
    report = read_sqlite(b.write(tmp_path / "x.sqlite"))
    assert report.api_calls["api_name"].to_list() == ["cudaLaunchKernel_v7000", "cudaMalloc_v3020"]
    assert meta(report)["backtrace_twin_rows"] == "2"
    assert meta(report)["duplicate_launch_rows"] == "0"


def test_a_twin_without_its_real_row_is_kept(tmp_path):
    b = SynthExport()
    b.launch(1, 1, 0, 1, corr=1, event_class=67, api="cudaLaunchKernel")
    b.kernel(1, 0, 7, 1, 2, corr=1)
    report = read_sqlite(b.write(tmp_path / "x.sqlite"))
    assert report.api_calls["api_name"].to_list() == ["cudaLaunchKernel"]
    assert meta(report)["backtrace_twin_rows"] == "0"


def test_copies_of_a_call_are_dropped_and_counted_other_calls_kept(tmp_path):
    """A copy of a row (every column alike) is one call; two calls that share an id but
    differ are both kept, for the attribution to call their launches ambiguous."""
    b = SynthExport()
    b.launch(1, 1, 0, 1, corr=1)
    b.launch(1, 1, 0, 1, corr=1)  # a copy: dropped
    b.launch(1, 2, 5, 6, corr=1, api="cuLaunchKernel")  # same process and id, another call
    b.launch(2, 1, 0, 1, corr=1)  # another process
    b.kernel(1, 0, 7, 1, 2, corr=1)
    report = read_sqlite(b.write(tmp_path / "x.sqlite"))
    calls = report.api_calls.sort("pid", "start_ns")
    assert calls.select("pid", "tid", "start_ns").rows() == [(1, 1, 0), (1, 2, 5 * MS), (2, 1, 0)]
    assert meta(report)["duplicate_launch_rows"] == "1"


def test_calls_with_ids_rising_in_each_process_are_all_kept(tmp_path):
    """Ids rising within each process (processes interleaved, ids shared between them)
    repeat nowhere; a repeat after a rise is still found."""
    b = SynthExport()
    for corr in (1, 2, 3):
        b.launch(1, 1, 2 * corr, 2 * corr + 1, corr=corr)
        b.launch(2, 1, 2 * corr, 2 * corr + 1, corr=corr)
    b.kernel(1, 0, 7, 1, 2, corr=1)
    report = read_sqlite(b.write(tmp_path / "x.sqlite"))
    assert report.api_calls.height == 6
    assert meta(report)["duplicate_launch_rows"] == "0"
    b.launch(1, 1, 4, 5, corr=2)  # a copy of process 1's id 2, after its 3
    report = read_sqlite(b.write(tmp_path / "y.sqlite"))
    assert report.api_calls.height == 6
    assert meta(report)["duplicate_launch_rows"] == "1"


@pytest.mark.parametrize("corr", [7, 2**40, -3])
def test_duplicates_found_whatever_the_correlation_id_range(tmp_path, corr):
    """Ids that do not fit the packed (pid, id) key take the general path."""
    b = SynthExport()
    b.launch(1, 1, 0, 1, corr=corr)
    b.launch(1, 1, 0, 1, corr=corr)  # a copy
    b.launch(2, 1, 0, 1, corr=corr)
    b.launch(1, 1, 4, 5, corr=5)
    b.kernel(1, 0, 7, 1, 2, corr=corr)
    report = read_sqlite(b.write(tmp_path / "x.sqlite"))
    got = report.api_calls.sort("pid", "start_ns").select("pid", "correlation_id", "start_ns")
    assert got.rows() == [(1, corr, 0), (1, 5, 4 * MS), (2, corr, 0)]
    assert meta(report)["duplicate_launch_rows"] == "1"


def test_launch_calls_are_counted_by_api_name(tmp_path):
    b = SynthExport()
    apis = [
        "cudaLaunchKernel_v7000",
        "cuLaunchKernelEx",
        "cudaGraphLaunch_v10000",
        "cudaMemcpyAsync_v3020",
        "cudaStreamSynchronize_v3020",
    ]
    for corr, api in enumerate(apis):
        b.launch(1, 1, corr, corr + 0.5, corr=corr, api=api, event_class=int(api.startswith("cu")))
    b.kernel(1, 0, 7, 0, 1, corr=0)
    assert meta(read_sqlite(b.write(tmp_path / "x.sqlite")))["cuda_launch_calls"] == "3"


# ---------------------------------------------------------------- ranges
def test_range_names_from_text_or_registered_strings(tmp_path):
    b = training_step()
    b.range(10, 11, 1, 2, "forward", style="textId")
    b.range(10, 11, 2, 3, "backward", style="text")
    ranges = read_sqlite(b.write(tmp_path / "x.sqlite")).ranges
    assert ranges.sort("start_ns")["name"].to_list() == ["step 0", "forward", "backward"]
    assert ranges["kind"].unique().to_list() == ["push_pop"]
    assert ranges["depth"].is_null().all() and ranges["parent_id"].is_null().all()
    assert ranges["range_id"].n_unique() == 3


def test_domains_by_process_and_missing_create_events(tmp_path):
    b = training_step()
    b.range(10, 11, 1, 2, "send", domain="NCCL", style="textId")
    b.domain(10, "hidden", create_event=False)
    b.range(10, 11, 2, 3, "x", domain="hidden")
    b.range(20, 21, 1, 2, "allreduce", domain="MPI")  # domain id 1 in process 20
    got = read_sqlite(b.write(tmp_path / "x.sqlite")).ranges.sort("pid", "start_ns")
    assert got.select("pid", "name", "domain").rows() == [
        (10, "step 0", None),
        (10, "send", "NCCL"),
        (10, "x", None),
        (20, "allreduce", "MPI"),
    ]


@pytest.mark.slow
def test_marks_thread_names_and_domain_creations_are_not_ranges(tmp_path):
    b = training_step()
    b.mark(10, 11, 4, "checkpoint")
    b.mark(10, 11, 4, "renamed", event_type=39)
    b.domain(10, "NCCL")
    assert read_sqlite(b.write(tmp_path / "x.sqlite")).ranges["name"].to_list() == ["step 0"]


def test_start_end_ranges_keep_the_starting_thread(tmp_path):
    b = training_step()
    b.range(10, 11, 2, 6, "async work", event_type=60, end_tid=99)
    ranges = read_sqlite(b.write(tmp_path / "x.sqlite")).ranges.filter(kind="start_end")
    assert ranges.select("tid", "start_ns", "end_ns").rows() == [(11, 2 * MS, 6 * MS)]


def test_open_ranges_are_read_without_an_end(tmp_path):
    """The reader keeps an open range's end null and counts it; normalising closes it.

    ms   0 ... 4 ........ 9 10
    step |-----------------|
    open      |- - - - - ->|     closed with its container (load_profile)
    """
    b = training_step()
    b.range(10, 11, 4, None, "never closed")
    path = b.write(tmp_path / "x.sqlite")
    report = read_sqlite(path)
    ends = dict(report.ranges.select("name", "end_ns").rows())
    assert ends == {"step 0": 10 * MS, "never closed": None}
    assert meta(report)["ranges_open_at_end"] == "1"
    assert meta(report)["capture_end_ns"] == str(10 * MS)
    closed = load_profile(path)
    assert dict(closed.ranges.select("name", "end_ns").rows())["never closed"] == 10 * MS


def test_a_range_opened_last_extends_the_capture(tmp_path):
    """A range opened at 12 ms, after every other event, proves the capture ran that long.

    ms   0 ... 4 ........ 10   12
    open      |- - - - ->|          inside the step: ends with it
    late                       |    nothing after it on its thread: zero length
    """
    b = training_step()
    b.range(10, 11, 4, None, "never closed")
    b.range(10, 11, 12, None, "opened last", event_type=60)
    path = b.write(tmp_path / "x.sqlite")
    assert meta(read_sqlite(path))["capture_end_ns"] == str(12 * MS)
    report = load_profile(path)
    ends = dict(report.ranges.select("name", "end_ns").rows())
    assert (ends["never closed"], ends["opened last"]) == (10 * MS, 12 * MS)
    assert meta(report)["ranges_open_at_end"] == "2"


# ------------------------------------------------------ threads, devices, meta
def test_threads_keep_their_last_name(tmp_path):
    b = training_step()
    b.thread(10, 12, "pt_autograd_0")
    b.thread(10, 11, "MainThread")
    threads = read_sqlite(b.write(tmp_path / "x.sqlite")).threads.sort("tid")
    assert threads.rows() == [(10, 11, "MainThread"), (10, 12, "pt_autograd_0")]


def test_devices_from_target_info_gpu(step_report):
    assert step_report.devices.rows() == [(0, "NVIDIA H100", 132, 80 * 2**30, "9.0")]


@pytest.mark.slow
def test_devices_from_older_layouts(tmp_path):
    tables = training_step().tables()
    older = pl.DataFrame({"deviceId": [3], "name": ["Tesla V100"], "smCount": [80]})
    path = write_export(
        tmp_path / "a.sqlite",
        tables | {"TARGET_INFO_GPU": older},
        exact_columns={"TARGET_INFO_GPU"},
    )
    assert read_sqlite(path).devices.rows() == [(3, "Tesla V100", 80, None, None)]
    oldest = pl.DataFrame(
        {
            "deviceId": [0],
            "name": ["Tesla P100"],
            "numMultiprocessors": [56],
            "totalGlobalMem": [16 * 2**30],
            "computeCapabilityMajor": [6],
            "computeCapabilityMinor": [0],
        }
    )
    del tables["TARGET_INFO_GPU"]
    path = write_export(tmp_path / "b.sqlite", tables | {"TARGET_INFO_CUDA_GPU": oldest})
    assert read_sqlite(path).devices.rows() == [(0, "Tesla P100", 56, 16 * 2**30, "6.0")]
    path = write_export(tmp_path / "c.sqlite", tables)
    assert read_sqlite(path).devices.is_empty()


def test_meta_from_current_metadata_tables(tmp_path):
    path = training_step().write(tmp_path / "x.sqlite", omit=("NVTX_EVENTS",))
    facts = meta(read_sqlite(path))
    assert facts["backend"] == "nsys" and facts["source_path"] == str(path)
    assert (facts["nsys_version"], facts["export_schema_version"]) == ("2026.2.1.210", "3.25.0")
    assert (facts["capture_start_ns"], facts["capture_end_ns"]) == ("1000000", str(9 * MS))
    assert facts["tables_missing"] == "NVTX_EVENTS"
    assert facts["cuda_launch_calls"] == "1"


def test_meta_from_the_2022_metadata_table_and_without_any(tmp_path):
    b = SynthExport()
    b.kernel(1, 0, 7, 0, 1, corr=1)
    b.meta("EXPORT_PRODUCT_VERSION", "2022.4.2.1", table="EXPORT_META_DATA")
    b.meta("EXPORT_USER", b"Alexander Gei\xdf", table="EXPORT_META_DATA")
    facts = meta(read_sqlite(b.write(tmp_path / "a.sqlite", omit=("META_DATA_EXPORT",))))
    assert facts["nsys_version"] == "2022.4.2.1" and "export_schema_version" not in facts
    omit = ("META_DATA_EXPORT", "EXPORT_META_DATA", "META_DATA_CAPTURE")
    facts = meta(read_sqlite(b.write(tmp_path / "b.sqlite", omit=omit)))
    assert "nsys_version" not in facts and facts["backend"] == "nsys"


# ---------------------------------------------------------------- text
def test_invalid_utf8_is_decoded_with_replacement_characters(tmp_path):
    b = training_step()
    b.range(10, 11, 1, 2, b"bad \xff name")
    b.range(10, 11, 2, 3, b"registered \xfe", style="textId")
    b.thread(10, 12, b"Gei\xdf")
    b.kernel(10, 0, 7, 9, 10, corr=9, name=b"void k\xc3(int)")
    report = read_sqlite(b.write(tmp_path / "x.sqlite"))
    names = set(report.ranges["name"])
    assert {"bad \ufffd name", "registered \ufffd"} <= names
    assert "Gei\ufffd" in report.threads["thread_name"].to_list()
    assert "void k\ufffd(int)" in report.ops["name"].to_list()


@pytest.mark.slow
def test_null_texts_before_the_first_name_do_not_confuse_type_inference(tmp_path):
    """70,000 registered-string ranges (text NULL) come before the first inline one."""
    n = 70_000
    b = training_step()
    text_id = b.string_id("registered")
    tables = b.tables()
    registered = pl.DataFrame(
        {
            "start": range(n),
            "end": range(1, n + 1),
            "eventType": 59,
            "text": pl.Series([None] * n, dtype=pl.String),
            "globalTid": global_tid(10, 11),
            "textId": text_id,
            "domainId": 0,
        }
    )
    inline = registered.head(1).with_columns(text=pl.lit("inline"), textId=None)
    tables["NVTX_EVENTS"] = pl.concat([registered, inline])
    ranges = read_sqlite(write_export(tmp_path / "x.sqlite", tables)).ranges
    assert ranges["name"].value_counts().sort("name").rows() == [("inline", 1), ("registered", n)]


def test_paths_with_uri_special_characters(tmp_path):
    odd = tmp_path / "dir with space #1" / "run?v=1%.sqlite"
    odd.parent.mkdir()
    report = read_sqlite(training_step().write(odd))
    assert report.ops.height == 3


def test_reading_leaves_no_journal_or_lock_files(tmp_path):
    path = training_step().write(tmp_path / "x.sqlite")
    before = sorted(os.listdir(tmp_path))
    read_sqlite(path)
    assert sorted(os.listdir(tmp_path)) == before


# ---------------------------------------------------------------- errors
def assert_one_line_error(info, cls, code, *fragments):
    message = str(info.value)
    assert type(info.value) is cls and info.value.exit_code == code
    assert "\n" not in message and message.strip() == message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_missing_file(tmp_path):
    with pytest.raises(InputNotFound) as info:
        read_sqlite(tmp_path / "nope.sqlite")
    assert_one_line_error(info, InputNotFound, ExitCode.INPUT_NOT_FOUND, "nope.sqlite", "no such")


def test_directory(tmp_path):
    with pytest.raises(InputNotFound) as info:
        read_sqlite(tmp_path)
    assert_one_line_error(info, InputNotFound, ExitCode.INPUT_NOT_FOUND, "directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file(tmp_path):
    path = training_step().write(tmp_path / "x.sqlite")
    path.chmod(0)
    with pytest.raises(InputNotFound) as info:
        read_sqlite(path)
    assert_one_line_error(info, InputNotFound, ExitCode.INPUT_NOT_FOUND, "cannot read")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"", "empty file"),
        (b"NSYS report, not SQLite" * 10, "not an SQLite file"),
        (b"SQLite format 3\x00" + b"\x10\x00", "truncated"),
    ],
)
def test_files_that_are_not_sqlite(tmp_path, content, fragment):
    path = tmp_path / "report.nsys-rep"
    path.write_bytes(content)
    with pytest.raises(NotAProfile) as info:
        read_sqlite(path)
    assert_one_line_error(info, NotAProfile, ExitCode.UNUSABLE_INPUT, fragment, str(path))


def test_truncated_copy_of_a_valid_export(tmp_path):
    valid = training_step().write(tmp_path / "valid.sqlite")
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(valid.read_bytes()[: valid.stat().st_size // 2])
    with pytest.raises(NotAProfile) as info:
        read_sqlite(cut)
    assert_one_line_error(info, NotAProfile, ExitCode.UNUSABLE_INPUT, "truncated")


def test_corrupt_pages(tmp_path):
    path = training_step().write(tmp_path / "x.sqlite")
    data = bytearray(path.read_bytes())
    data[100:] = b"\xa5" * (len(data) - 100)  # keep the header, garble every page
    path.write_bytes(bytes(data))
    with pytest.raises(NotAProfile) as info:
        read_sqlite(path)
    assert_one_line_error(info, NotAProfile, ExitCode.UNUSABLE_INPUT, "unreadable SQLite")


def test_sqlite_without_nsys_tables(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER, body TEXT)")
    with pytest.raises(NotAProfile) as info:
        read_sqlite(path)
    assert_one_line_error(
        info, NotAProfile, ExitCode.UNUSABLE_INPUT, "not an Nsight Systems export"
    )


def test_nvtx_only_export(tmp_path):
    b = SynthExport()
    b.range(1, 1, 0, 5, "forward")
    path = b.write(tmp_path / "nvtx.sqlite")
    with pytest.raises(NoGpuData) as info:
        read_sqlite(path)
    assert_one_line_error(
        info, NoGpuData, ExitCode.NO_GPU_DATA, "CUPTI_ACTIVITY_KIND_KERNEL", "--trace=cuda"
    )
    report = read_sqlite(path, require_gpu=False)
    assert report.ops.is_empty() and report.ranges["name"].to_list() == ["forward"]
    assert report.ops.schema == schemas.PROFILE_OPS


def test_launches_without_gpu_activity_like_wsl2(tmp_path):
    b = SynthExport()
    for corr in range(3):
        b.launch(1, 1, corr, corr + 0.5, corr=corr)
    b.launch(1, 1, 5, 6, corr=9, api="cudaMalloc_v3020")
    with pytest.raises(NoGpuData) as info:
        read_sqlite(b.write(tmp_path / "wsl.sqlite"))
    assert_one_line_error(
        info, NoGpuData, ExitCode.NO_GPU_DATA, "3 CUDA kernel launches", "WSL2", "--trace=cuda"
    )


def test_empty_gpu_tables(tmp_path):
    tables = training_step().tables()
    for name in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"):
        tables[name] = None
    del tables["CUPTI_ACTIVITY_KIND_MEMSET"]
    path = write_export(tmp_path / "x.sqlite", tables)
    with pytest.raises(NoGpuData) as info:
        read_sqlite(path)
    assert_one_line_error(info, NoGpuData, ExitCode.NO_GPU_DATA, "MEMSET absent")
    assert read_sqlite(path, require_gpu=False).ops.is_empty()


def test_read_only_corpus_like_directory(tmp_path):
    source = training_step().write(tmp_path / "x.sqlite")
    folder = tmp_path / "ro"
    folder.mkdir()
    path = shutil.copy(source, folder / "x.sqlite")
    os.chmod(path, 0o444)
    folder.chmod(0o555)
    try:
        assert read_sqlite(path).ops.height == 3
        assert os.listdir(folder) == ["x.sqlite"]  # nothing written beside it
    finally:
        folder.chmod(0o755)


# ------------------------------------------------------------- properties
ops = st.lists(
    st.tuples(
        st.sampled_from(["kernel", "memcpy", "memset"]),
        st.integers(0, 3),  # device
        st.integers(0, 50),  # start ms
        st.integers(0, 20),  # duration ms
        st.booleans(),  # launched with a backtrace twin
    ),
    max_size=30,
)


@pytest.mark.slow
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops)
def test_every_op_is_read_once_with_its_duration(tmp_path_factory, ops):
    """Per device, op counts and summed durations match the raw tables."""
    b = SynthExport()
    for corr, (kind, device, start, dur, twin) in enumerate(ops):
        b.launch(1, 1, start, start + 0.5, corr=corr, twin=twin)
        getattr(b, kind)(1, device, 7, start, start + dur, corr)
    path = b.write(tmp_path_factory.mktemp("p") / "x.sqlite")
    report = read_sqlite(path, require_gpu=False)
    totals = report.ops.group_by("device_id").agg(pl.len(), pl.col("dur_ns").sum())
    got = {d: (n, t) for d, n, t in totals.rows()}
    assert got == independent_gpu_totals(path)
    assert report.api_calls.height == len(ops)
    assert report.ops["op_id"].n_unique() == len(ops)


def test_a_bulk_export_reads_whole(tmp_path):
    path = write_export(tmp_path / "bulk.sqlite", bulk_tables(100, ranges_per_kernel=3))
    report = read_sqlite(path)
    assert (report.ops.height, report.api_calls.height, report.ranges.height) == (100, 100, 300)
    launched = report.ops.join(report.api_calls, on=["pid", "correlation_id"])
    assert launched.height == 100
    names = report.ranges["name"]
    assert names.null_count() == 0
    assert names.str.starts_with("aten::").sum() == names.str.starts_with("nccl:").sum() == 150
