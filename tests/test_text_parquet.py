"""ops.parquet's writer (nsysmap.output.text_parquet): blocks written while the next
ones are made, read back as they were given, and an error in the middle is the
caller's."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import polars as pl
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from nsysmap.output import text_parquet
from nsysmap.output.text_parquet import write_coded

SCHEMA = pl.Schema({"op_id": pl.Int64, "name": pl.String, "range_name": pl.String})


def _blocks(n: int, rows: int) -> list[pl.DataFrame]:
    return [
        pl.DataFrame(
            {
                "op_id": range(b * rows, (b + 1) * rows),
                "name": [f"kernel_{i % 3}" for i in range(rows)],
                "range_name": [f"aten::mm, seq = {b * rows + i}" for i in range(rows)],
            },
            schema=SCHEMA,
        )
        for b in range(n)
    ]


def test_blocks_read_back_in_order_as_one_table(tmp_path):
    blocks = _blocks(5, 1000)
    path = tmp_path / "ops.parquet"
    assert write_coded(iter(blocks), SCHEMA, path) == 5000
    back = pl.read_parquet(path)
    assert back.schema == SCHEMA  # texts read as strings, not dictionaries
    assert_frame_equal(back, pl.concat(blocks))


def test_integers_are_delta_coded_and_texts_dictionary_coded(tmp_path):
    """Integers in Parquet's delta encoding (rising ids and times cost a few bits a row),
    the repeated texts as a dictionary, the nearly unique ones plain; nulls kept."""
    schema = pl.Schema({**SCHEMA, "depth": pl.Int32, "stream_id": pl.Int64})
    blocks = [
        b.with_columns(depth=pl.lit(3, pl.Int32), stream_id=pl.lit(None, pl.Int64))
        for b in _blocks(2, 500)
    ]
    path = tmp_path / "ops.parquet"
    write_coded(blocks, schema, path)
    group = pq.ParquetFile(path).metadata.row_group(0)
    encodings = {
        group.column(i).path_in_schema: set(group.column(i).encodings)
        for i in range(group.num_columns)
    }
    for column in ("op_id", "depth", "stream_id"):
        assert "DELTA_BINARY_PACKED" in encodings[column], (column, encodings[column])
    assert "RLE_DICTIONARY" in encodings["name"]
    assert "RLE_DICTIONARY" not in encodings["range_name"]
    assert_frame_equal(pl.read_parquet(path), pl.concat(blocks))


def test_the_next_block_is_made_while_one_is_written(tmp_path, monkeypatch):
    """The first block's write waits until the second block has been made: written one
    after the other on one thread, it would wait in vain."""
    import pyarrow.parquet as pq

    real = pq.ParquetWriter.write_table
    second_made = threading.Event()
    waited: list[bool] = []

    def write_table(self, table, *args, **kwargs):
        if not waited:
            waited.append(second_made.wait(5))
        return real(self, table, *args, **kwargs)

    def blocks() -> Iterator[pl.DataFrame]:
        first, *rest = _blocks(3, 10)
        yield first
        second_made.set()
        yield from rest

    monkeypatch.setattr(pq.ParquetWriter, "write_table", write_table)
    assert write_coded(blocks(), SCHEMA, tmp_path / "ops.parquet", beside=True) == 30
    assert waited == [True]


def test_an_error_while_making_blocks_reaches_the_caller_and_leaves_no_thread(tmp_path):
    def blocks() -> Iterator[pl.DataFrame]:
        yield from _blocks(2, 10)
        raise KeyboardInterrupt

    before = threading.active_count()
    with pytest.raises(KeyboardInterrupt):
        write_coded(blocks(), SCHEMA, tmp_path / "ops.parquet", beside=True)
    assert threading.active_count() == before


def test_not_beside_each_block_is_written_before_the_next_is_made(tmp_path, monkeypatch):
    """`beside=False` (a profile read apart to fit the memory budget): block k is written
    before block k + 1 is asked for, so no two are held at once."""
    import pyarrow.parquet as pq

    real = pq.ParquetWriter.write_table
    events: list[str] = []

    def write_table(self, table, *args, **kwargs):
        events.append(f"write {table['op_id'][0].as_py() // 10}")
        return real(self, table, *args, **kwargs)

    def blocks() -> Iterator[pl.DataFrame]:
        for k, block in enumerate(_blocks(3, 10)):
            events.append(f"make {k}")
            yield block

    monkeypatch.setattr(pq.ParquetWriter, "write_table", write_table)
    path = tmp_path / "ops.parquet"
    assert write_coded(blocks(), SCHEMA, path, beside=False) == 30
    assert events == ["make 0", "write 0", "make 1", "write 1", "make 2", "write 2"]
    assert_frame_equal(pl.read_parquet(path), pl.concat(_blocks(3, 10)))


def test_a_profile_read_apart_writes_its_chunks_one_after_the_other(tmp_path):
    """Read apart to fit the memory budget: no chunk waits beside the next; read whole
    with more operations than are held: written beside; fewer: held, not streamed."""
    from nsysmap.output.ops_sinks import STREAM_OPS, HoldOps, StreamOps, sink_for

    staged = lambda: tmp_path / "ops.parquet"  # noqa: E731
    apart = sink_for(10, staged, stream=True)
    whole = sink_for(STREAM_OPS + 1, staged)
    assert isinstance(apart, StreamOps) and not apart.beside
    assert isinstance(whole, StreamOps) and whole.beside
    assert isinstance(sink_for(STREAM_OPS, staged), HoldOps)


@pytest.mark.skipif(
    not text_parquet.VIEWS_WRITABLE, reason="this PyArrow writes no string views to Parquet"
)
def test_texts_written_as_views_make_the_same_file_byte_for_byte(tmp_path, monkeypatch):
    """Plain texts handed to the writer as string views (no copy), coded ones as
    dictionaries of strings: the same bytes as every text copied into Arrow strings,
    with nulls, long and non-ASCII texts, and an Enum beside them."""
    kind = pl.Enum(["kernel", "memcpy"])
    schema = pl.Schema({**SCHEMA, "kind": kind, "range_path": pl.String})
    blocks = [
        b.with_columns(
            kind=pl.Series(["kernel", "memcpy"] * (b.height // 2), dtype=kind),
            range_path=pl.concat_str(pl.lit("nsysmap:step:1 > Attention µ > "), "range_name"),
            name=pl.when(pl.col("op_id") % 7 == 0).then(None).otherwise("name"),
        ).with_columns(
            range_name=pl.when(pl.col("op_id") % 5 == 0).then(None).otherwise("range_name")
        )
        for b in _blocks(3, 400)
    ]
    files = {}
    for views in (False, True):
        monkeypatch.setattr(text_parquet, "VIEWS_WRITABLE", views)
        files[views] = tmp_path / f"views-{views}.parquet"
        text_parquet.write_coded(blocks, schema, files[views])
    assert files[True].read_bytes() == files[False].read_bytes()
    back = pl.read_parquet(files[True])
    assert back.schema == schema
    assert_frame_equal(back, pl.concat(blocks))
