"""The structure read a process at a time (nsysmap.structure.model.structure_in_parts):
the table of all the operations at once, whatever the order of the parts, with one part's
operations in memory at a time, each part read twice (its evidence, then its counts)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from devtools.synth.bulk import write_export
from devtools.synth.tile import gpt_tables
from nsysmap.core.timings import Stages
from nsysmap.flow.verbs import analyse
from nsysmap.sources.reading import load_profile
from nsysmap.structure.model import (
    COUNTED_COLUMNS,
    OPS_COLUMNS,
    build_structure,
    structure_in_parts,
)
from nsysmap.structure.ranges import slim_ranges

Inputs = tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    """The operations (OPS_COLUMNS), SLIM ranges and inferred labels of a GPT-2-like
    export of two processes with step, phase and module ranges."""
    path = write_export(
        Path(tmp_path_factory.mktemp("parts")) / "two.sqlite",
        gpt_tables(1200, seed=3, processes=2),
    )
    profile = load_profile(path)
    analysis = analyse(profile, stages=Stages(progress=False))
    assert analysis.inferred is not None
    ops = analysis.store.read(OPS_COLUMNS)
    assert ops["pid"].n_unique() == 2
    return ops, slim_ranges(profile.ranges), analysis.inferred.labels


def _unlabelled(ops: pl.DataFrame) -> pl.DataFrame:
    """`ops` without step and phase labels: the passes come from the phase ranges,
    records and the kernel sequence, and the inferred ones are judged across processes."""
    none = [pl.lit(None, ops.schema[c]).alias(c) for c in ("step", "step_source", "phase")]
    return ops.with_columns(*none, phase_source=pl.lit(None, ops.schema["phase_source"]))


def _by_process(ops: pl.DataFrame, order: list[int]):  # type: ignore[no-untyped-def]
    """Parts of `ops`, one process each in `order`, and the reads made of them."""
    reads: list[tuple[str, ...]] = []

    def parts(columns: tuple[str, ...]) -> Iterator[pl.DataFrame]:
        reads.append(columns)
        for pid in order:
            yield ops.filter(pl.col("pid") == pid).select(columns)

    return parts, reads


@pytest.mark.parametrize("labels", ["labelled", "unlabelled"])
def test_a_process_at_a_time_gives_the_table_of_all_at_once(two_processes: Inputs, labels: str):
    ops, ranges, inferred = two_processes
    ops = ops if labels == "labelled" else _unlabelled(ops)
    whole = build_structure(ops, ranges, inferred)
    assert whole["pid"].n_unique() == 2 and whole.filter(kind="pass").height >= 4
    pids = sorted(ops["pid"].unique().to_list())
    for order in (pids, pids[::-1]):
        parts, reads = _by_process(ops, order)
        apart = structure_in_parts(parts, ranges, inferred)
        assert apart.equals(whole)
        assert reads == [OPS_COLUMNS, COUNTED_COLUMNS]


def test_one_part_is_held_at_a_time(two_processes: Inputs):
    ops, ranges, inferred = two_processes
    pids = sorted(ops["pid"].unique().to_list())
    held: list[bool] = []

    def parts(columns: tuple[str, ...]) -> Iterator[pl.DataFrame]:
        last = None
        for pid in pids:
            if last is not None:
                gc.collect()
                held.append(last() is not None)  # the part before, still referenced?
            frame = ops.filter(pl.col("pid") == pid).select(columns)
            last = weakref.ref(frame)
            yield frame
            del frame

    structure_in_parts(parts, ranges, inferred)
    assert held == [False, False]  # one check per read (evidence, counts)
