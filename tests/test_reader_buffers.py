"""What a frame the nsys reader returns keeps alive: its own rows, not the driver's batch.

The SQLite driver gives every column of a batch room for BATCH_ROWS rows,
however few it holds, and Polars takes integers and the bytes of longer texts
without a copy. A small frame that the flow keeps to the end (each time
window's devices, threads and meta) must not keep those megabytes alive: read
in 8 windows, the 10^6-kernel export of the benchmark held 0.67 GB of them by
the last window.
"""

from __future__ import annotations

import ctypes
import gc
import sys

import polars as pl
import pyarrow as pa
import pytest

from devtools.synth.bulk import write_export
from devtools.synth.tile import gpt_tables
from nsysmap.read.nsys import nsys_specs as specs
from nsysmap.read.nsys.nsys_probe import BATCH_ROWS, open_export
from nsysmap.read.nsys.nsys_sql import SMALL_BATCH, _frame, read_table
from nsysmap.read.nsys.nsys_sqlite import read_sqlite

SPEC = specs.TableSpec("T", "n", "label")
INTS = specs.TableSpec("T", "n")


def _batch(rows: int, keep: int, *, labels: bool = True) -> pa.RecordBatch:
    """`keep` rows of a batch of `rows`: its columns views of larger buffers, as the
    driver's are (allocated in Arrow's pool, so that what they hold can be counted)."""
    columns = {"n": pa.array(range(rows), pa.int64())}
    if labels:
        texts = [f"a label longer than twelve bytes {i}".encode() for i in range(rows)]
        columns["label"] = pa.array(texts)
    return pa.RecordBatch.from_pydict(columns).slice(0, keep)


def test_a_batch_that_is_not_full_is_taken_as_a_copy_of_its_own_size():
    """Once the batch is gone, the frame of its 3 rows holds no more of Arrow's memory
    than those rows need (before: both columns' whole buffers, 3.4 MB)."""
    gc.collect()
    before = pa.total_allocated_bytes()
    batch = _batch(50_000, 3)
    held = pa.total_allocated_bytes() - before
    assert held > 2_000_000  # the buffers the slice views
    frame = _frame(SPEC, batch)
    del batch
    gc.collect()
    assert pa.total_allocated_bytes() - before < 10_000
    assert frame["n"].to_list() == [0, 1, 2]
    assert frame["label"][2] == "a label longer than twelve bytes 2"


@pytest.mark.parametrize("rows", [SMALL_BATCH + 1, BATCH_ROWS])
def test_a_larger_batch_is_taken_without_a_copy(rows):
    """A batch of more than SMALL_BATCH rows fills a sixteenth of its buffers or more:
    it is taken as it is (a copy would cost time and, for a moment, twice the memory)."""
    batch = _batch(rows, rows, labels=False)
    gc.collect()
    before = pa.total_allocated_bytes()
    frame = _frame(INTS, batch)
    assert pa.total_allocated_bytes() - before < 10_000  # nothing new in Arrow's pool
    assert frame.height == rows
    assert frame["n"][-1] == rows - 1


def _malloc_bytes() -> int | None:
    """The bytes glibc's malloc has handed out and not had back (the driver allocates
    with it), or None where this is not glibc (mallinfo2: glibc 2.33 and later)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "mallinfo2"):
        return None

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in [
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            ]
        ]

    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def test_a_small_table_kept_from_the_driver_holds_only_its_rows(tmp_path):
    """The driver's own allocations (glibc): a two-row table read and kept, ten times,
    holds less than a megabyte of them (before: 8 MiB per integer column per read)."""
    if _malloc_bytes() is None:
        pytest.skip("needs glibc's mallinfo2 to count the driver's buffers")
    export = open_export(write_export(tmp_path / "small.sqlite", gpt_tables(200, seed=1)))
    gc.collect()
    before = _malloc_bytes()
    kept = [read_table(export, specs.GPU_INFO) for _ in range(10)]
    gc.collect()
    after = _malloc_bytes()
    assert before is not None and after is not None
    assert all(frame is not None and frame.height == 2 for frame in kept)
    assert after - before < 1 << 20


def test_a_windows_devices_hold_only_their_rows(tmp_path):
    """What the flow keeps of every part read (its devices, threads and meta) holds
    less than a megabyte of the driver's buffers, for ten parts."""
    if _malloc_bytes() is None:
        pytest.skip("needs glibc's mallinfo2 to count the driver's buffers")
    export = write_export(tmp_path / "small.sqlite", gpt_tables(200, seed=1))
    gc.collect()
    before = _malloc_bytes()
    kept = []
    for _ in range(10):
        profile = read_sqlite(export, process=None)
        kept.append((profile.devices, profile.threads, profile.meta))
        del profile
    gc.collect()
    after = _malloc_bytes()
    assert before is not None and after is not None
    assert all(isinstance(devices, pl.DataFrame) and devices.height for devices, _, _ in kept)
    assert after - before < 1 << 20
