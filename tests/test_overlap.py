"""Communication overlap: known overlaps by hand, random ones against a plain-Python reference."""

from __future__ import annotations

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.synth import SynthExport
from nsysmap.cli import cli
from nsysmap.intervals import hiding
from nsysmap.summaries.comm_overlap import hidden_communication, overlap_line, overlap_table
from tests.reference import reference_overlap

MS = 1_000_000
PID, MAIN, COMMS = 7, 70, 71
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
COLUMNS = ["kind", "category", "device_id", "stream_id", "start_ns", "end_ns", "step"]


def _ops(rows: list[tuple]) -> pl.DataFrame:
    schema = {c: pl.String if c in ("kind", "category") else pl.Int64 for c in COLUMNS}
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    return frame.with_columns(
        pid=pl.lit(PID, pl.Int64), dur_ns=pl.col("end_ns") - pl.col("start_ns")
    )


def _two_stream_export() -> SynthExport:
    """Device 0: NCCL on streams 20 and 21; compute on streams 7 and 8 (overlapping each
    other) and a graph replay on stream 9; a memcpy that does not count as compute.
    Device 1: NCCL with no compute at all. Step 0 is [0, 40) ms, step 1 [40, 80)."""
    b = SynthExport()
    b.range(PID, MAIN, 0, 40, "nsysmap:step:0")
    b.range(PID, MAIN, 40, 80, "nsysmap:step:1")
    b.range(PID, COMMS, 0, 40, "nsysmap:step:0")
    b.range(PID, COMMS, 40, 80, "nsysmap:step:1")
    ops = [
        # (device, stream, start, end, launching thread, launch time, name)
        (0, 20, 10, 30, COMMS, 1, NCCL),  # A, step 0
        (0, 21, 14, 26, COMMS, 2, NCCL),  # C, step 0
        (0, 20, 50, 60, COMMS, 41, NCCL),  # B, step 1
        (0, 7, 0, 15, MAIN, 0, "gemm_a"),
        (0, 7, 25, 35, MAIN, 3, "gemm_b"),
        (0, 8, 12, 18, MAIN, 4, "elementwise_c"),
        (0, 8, 55, 58, MAIN, 42, "elementwise_d"),
        (1, 3, 0, 10, COMMS, 5, NCCL),  # device 1, step 0
    ]
    for corr, (device, stream, start, end, tid, at, name) in enumerate(ops, start=1):
        b.launch(PID, tid, at, at + 0.5, corr)
        b.kernel(PID, device, stream, start, end, corr, name=name)
    b.launch(PID, MAIN, 43, 43.5, 100, api="cudaGraphLaunch_v10000")
    b.graph_replay(PID, 0, 9, 56, 59, 100, graph=1, exec_id=1)
    b.launch(PID, MAIN, 44, 44.5, 101, api="cudaMemcpyAsync_v3020")
    b.memcpy(PID, 0, 5, 40, 80, 101)  # copies are not compute
    return b


# By hand, device 0:
#   A [10, 30) on 20: compute on other streams [0, 18) (7 and 8 merged) and [25, 35):
#     8 + 5 = 13 ms covered (counting 7 and 8 separately would give 16)
#   C [14, 26) on 21: [14, 18) and [25, 26): 5 ms (A on stream 20 is no compute)
#   B [50, 60) on 20: [55, 58) on 8 and [56, 59) replay on 9, merged [55, 59): 4 ms
# Device 1: nothing covers [0, 10).
EXPECTED = [
    # device, step, comm_ops, comm_ns, overlapped_ns, exposed_ns
    (0, 0, 2, 32 * MS, 18 * MS, 14 * MS),
    (0, 1, 1, 10 * MS, 4 * MS, 6 * MS),
    (1, 0, 1, 10 * MS, 0, 10 * MS),
]


@pytest.mark.slow
def test_known_overlap_through_an_export(tmp_path):
    path = _two_stream_export().write(tmp_path / "nccl.sqlite")
    result = CliRunner().invoke(cli, ["attribute", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    overlap = pl.read_parquet(tmp_path / "out" / "overlap.parquet")
    keys = ["device_id", "step", "comm_ops", "comm_ns", "overlapped_ns", "exposed_ns"]
    assert overlap.select(keys).rows() == EXPECTED
    assert overlap["overlapped_share"].to_list() == [18 / 32, 4 / 10, 0.0]
    assert overlap["exposed_share"].to_list() == [14 / 32, 6 / 10, 1.0]
    line = next(x for x in result.stdout.splitlines() if x.startswith("Communication"))
    assert line == (
        "Communication 52.000 ms: 22.000 ms (42.3%) hidden behind compute on other streams,"
        " 30.000 ms (57.7%) exposed (exposed: device 0 47.6%, device 1 100.0%)."
    )


@pytest.mark.slow
def test_communication_time_matches_the_category_table(tmp_path):
    path = _two_stream_export().write(tmp_path / "nccl.sqlite")
    result = CliRunner().invoke(
        cli, ["attribute", "--quiet", str(path), "-o", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    overlap = pl.read_parquet(tmp_path / "out" / "overlap.parquet")
    categories = pl.read_parquet(tmp_path / "out" / "by_category.parquet")
    comm = categories.filter(pl.col("category") == "communication")
    per_device = overlap.group_by("device_id").agg(pl.col("comm_ns").sum()).sort("device_id")
    assert per_device.rows() == comm.select("device_id", "time_ns").sort("device_id").rows()


def test_no_communication_gives_an_empty_table_and_no_line():
    ops = _ops([("kernel", "gemm", 0, 7, 0, 10, 0), ("graph", "graph", 0, 8, 5, 9, 0)])
    table = overlap_table(ops)
    assert table.is_empty() and overlap_line(table) == ""


def test_without_communication_the_overlap_reads_no_operation(tmp_path):
    """With no communication in by_category, the overlap is empty and the operations are
    not read again (a scan of a file that is not there would fail); with some, they are."""
    from nsysmap.core import schemas
    from nsysmap.summaries.summarise import Summaries, with_overlap

    def summaries(*categories: str) -> Summaries:
        by_category = pl.DataFrame({"device_id": [0] * len(categories), "category": categories})
        return Summaries({"by_category": by_category, "overlap": schemas.empty(schemas.OVERLAP)})

    missing = pl.scan_parquet(tmp_path / "not_there.parquet")
    table = with_overlap(summaries("gemm", "elementwise"), missing).overlap
    assert table.is_empty() and table.schema == schemas.OVERLAP
    with pytest.raises(FileNotFoundError):
        with_overlap(summaries("gemm", "communication"), missing)
    talking = _ops([("kernel", "communication", 0, 20, 0, 10, 0)])
    got = with_overlap(summaries("communication"), talking).overlap
    assert got["comm_ns"].to_list() == [10]


def test_same_stream_compute_does_not_count():
    ops = _ops([("kernel", "communication", 0, 7, 0, 10, 0), ("kernel", "gemm", 0, 7, 5, 15, 0)])
    assert overlap_table(ops).select("overlapped_ns", "exposed_ns").row(0) == (0, 10)


def test_compute_of_another_process_does_not_count():
    """Two processes on one device: only a process's own compute hides its communication."""
    ops = _ops([("kernel", "communication", 0, 7, 0, 10, 0), ("kernel", "gemm", 0, 8, 0, 6, 0)])
    ops = pl.concat(
        [
            ops,
            _ops([("kernel", "gemm", 0, 9, 6, 10, 0)]).with_columns(pid=pl.lit(PID + 1, pl.Int64)),
        ]
    )
    assert overlap_table(ops).select("overlapped_ns", "exposed_ns").row(0) == (6, 4)


def test_ranks_of_several_reports_are_kept_apart():
    """Operations of several reports: two ranks may share a pid and a device number."""
    ops = _ops([("kernel", "communication", 0, 7, 0, 10, 0), ("kernel", "gemm", 0, 8, 0, 3, 0)])
    other = _ops([("kernel", "gemm", 0, 8, 3, 10, 0)])
    ops = pl.concat([ops.with_columns(rank=pl.lit(0)), other.with_columns(rank=pl.lit(1))])
    comm = hidden_communication(ops)
    assert comm.select("rank", "hidden_ns", "exposed_ns").rows() == [(0, 3, 7)]


@pytest.mark.parametrize("packed", [True, False])
def test_compute_inside_longer_compute_counts_once(packed):
    """[0, 10) holds [1, 2) and [3, 4): their union is [0, 10), whichever way it is merged."""
    rows = [("kernel", "communication", 0, 0, 0, 20, 0)]
    rows += [("kernel", "gemm", 0, 1, s, e, 0) for s, e in ((0, 10), (1, 2), (3, 4), (12, 14))]
    with pytest.MonkeyPatch.context() as patch:
        if not packed:
            patch.setattr(hiding, "PACK_BITS", 0)
        table = overlap_table(_ops(rows))
    assert table.select("overlapped_ns", "exposed_ns").row(0) == (12, 8)


interval = st.tuples(st.integers(0, 40), st.integers(1, 12)).map(lambda t: (t[0], t[0] + t[1]))
op = st.tuples(
    st.sampled_from([("kernel", "communication"), ("kernel", "gemm"), ("graph", "graph")]),
    st.integers(0, 1),  # device
    st.integers(0, 3),  # stream
    interval,
    st.sampled_from([None, 0, 1]),  # step
)


@pytest.mark.slow  # a property test against the reference: seconds
@settings(max_examples=200, deadline=None)
@given(st.lists(op, max_size=25), st.booleans())
def test_random_overlaps_match_the_reference(rows, packed):
    """Both ways of merging compute: one packed sort key, and (for times too wide to
    pack) windows per device and stream."""
    with pytest.MonkeyPatch.context() as patch:
        if not packed:
            patch.setattr(hiding, "PACK_BITS", 0)
        _check_against_reference(rows)


def _check_against_reference(rows: list) -> None:
    ops = _ops([(*kc, dev, stream, s, e, step) for kc, dev, stream, (s, e), step in rows])
    table = overlap_table(ops)
    got = {
        (d, s): (c, o)
        for d, s, c, o in table.select("device_id", "step", "comm_ns", "overlapped_ns").rows()
    }
    assert got == reference_overlap(ops)
    assert (table["overlapped_ns"] + table["exposed_ns"] == table["comm_ns"]).all()
