"""Where the OPS rows go as they are made: held in memory, or streamed into ops.parquet.

Attribution makes the OPS rows a chunk at a time (`attribute_chunks`); the
flow (`nsysmap.flow.verbs`) summarises each chunk as it passes and hands the
chunks to a sink, which decides what stays in memory::

    profile ─> locate (all ops) ──> chunk 1 ──┬─> partial summaries ──> summaries
                                    chunk 2 ──┤         ...
                                    ...       └─> sink
        HoldOps:    the chunks concatenated             -> HeldOps  (a frame)
        StreamOps:  written chunk by chunk, texts coded -> OpsFile  (ops.parquet)

Held rows serve the pure API (`nsysmap.analyse`) and inputs that fit; for
profiles with millions of operations `analyse_file` streams them, so that
they are never all in memory next to the profile. Either store reads the same
way (`scan`, `read`), counts its rows, and puts itself into an output folder
(`place`): the rows are exactly those `attribute(profile)` returns.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import polars as pl

from nsysmap.core import schemas
from nsysmap.output.placement import STAGING_MARK
from nsysmap.output.text_parquet import write_coded
from nsysmap.output.writer import OPS_FILE

CHUNK_ROWS = 250_000  # OPS rows a StreamOps materialises at a time (more: a higher peak, no faster)
# Profiles with more operations than this have their OPS rows streamed into a
# Parquet file as they are made, never all in memory (`sink_for`).
STREAM_OPS = 2_000_000


@dataclass(frozen=True)
class HeldOps:
    """OPS rows held in memory."""

    frame: pl.DataFrame

    @property
    def rows(self) -> int:
        return self.frame.height

    def scan(self) -> pl.LazyFrame:
        return self.frame.lazy()

    def read(self, columns: Sequence[str] | None = None) -> pl.DataFrame:
        return self.frame if columns is None else self.frame.select(columns)

    def place(self, folder: Path) -> None:
        """Write the rows as `folder`/ops.parquet."""
        write_ops([self.frame], folder / OPS_FILE, self.frame.schema)

    def placed(self, out_dir: Path) -> HeldOps:
        """The store once its outputs are in `out_dir`: still the frame held."""
        return self


@dataclass(frozen=True)
class OpsFile:
    """OPS rows in a Parquet file (read back only when asked for)."""

    path: Path
    rows: int

    def scan(self) -> pl.LazyFrame:
        return pl.scan_parquet(self.path)

    def read(self, columns: Sequence[str] | None = None) -> pl.DataFrame:
        return pl.read_parquet(self.path, columns=None if columns is None else list(columns))

    def place(self, folder: Path) -> None:
        """Move the file into `folder` from a staging folder, else copy it there."""
        if STAGING_MARK in self.path.parent.name:
            os.replace(self.path, folder / OPS_FILE)
        else:
            shutil.copyfile(self.path, folder / OPS_FILE)

    def placed(self, out_dir: Path) -> OpsFile:
        """The store once its outputs are in `out_dir`: out_dir/ops.parquet."""
        return OpsFile(Path(out_dir) / OPS_FILE, self.rows)


OpsStore = HeldOps | OpsFile


class OpsSink(Protocol):
    """Takes the chunks of OPS rows as they are made; returns where they are."""

    @property
    def chunk_rows(self) -> int | None: ...  # rows per chunk (None: one chunk)

    @property
    def stage(self) -> str: ...  # the stage its own time counts to

    def take(self, chunks: Iterator[pl.DataFrame]) -> OpsStore: ...


@dataclass(frozen=True)
class HoldOps:
    """Keep the rows in memory: the chunks, concatenated.

    One chunk by default: attributing a profile whole is as fast as it gets,
    and the rows are all held anyway.
    """

    chunk_rows: int | None = None
    stage: str = "attribute"

    def take(self, chunks: Iterator[pl.DataFrame]) -> HeldOps:
        frames = list(chunks)
        return HeldOps(frames[0] if len(frames) == 1 else pl.concat(frames))


@dataclass(frozen=True)
class StreamOps:
    """Write the rows to `path` chunk by chunk, their texts coded (`write_ops`);
    `beside`: each chunk written while the next is attributed (see `sink_for`)."""

    path: Path
    chunk_rows: int = field(default_factory=lambda: CHUNK_ROWS)
    stage: str = "write"
    beside: bool = True

    def take(self, chunks: Iterator[pl.DataFrame]) -> OpsFile:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return OpsFile(self.path, write_ops(chunks, self.path, beside=self.beside))


def write_ops(
    chunks: Iterable[pl.DataFrame],
    path: Path,
    schema: pl.Schema = schemas.OPS,
    *,
    beside: bool = False,
) -> int:
    """OPS rows (frames of `schema`) into the Parquet file `path`, chunk by chunk; how many.

    Their texts are written dictionary-coded (nsysmap.output.text_parquet):
    a kernel name costs memory once, however many rows it names. `beside`:
    each chunk is written on a thread of its own while the next is made.
    """
    return write_coded(chunks, schema, path, beside=beside)


def sink_for(operations: int, staged: Callable[[], Path], *, stream: bool = False) -> OpsSink:
    """HoldOps for a profile of `operations` up to STREAM_OPS, else (or when `stream`)
    StreamOps into the file `staged()` names (called only then)."""
    if not stream and operations <= STREAM_OPS:
        return HoldOps()
    # A profile read apart (by process or time window) to fit the memory budget keeps
    # the lower peak: its chunks are written one after the other. One read whole has
    # room for the one chunk that waits to be written while the next is attributed.
    return StreamOps(staged(), beside=not stream)
