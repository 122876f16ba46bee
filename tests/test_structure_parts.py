"""The structure read a process at a time (nsysmap.structure.model.structure_in_parts):
the table of all the operations at once, whatever the order of the parts, with one part's
operations in memory at a time, each part read twice (its evidence, then its counts)."""

from __future__ import annotations

import gc
import inspect
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
from nsysmap.structure.ranges import SLIM, slim_ranges
from nsysmap.structure.table import STRUCTURE

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


def _unranged(pid: int, n: int = 10) -> pl.DataFrame:
    """`n` operations of 100 ns of process `pid` on device 0, launched 1 µs apart, no
    label."""
    launches = [i * 1000 for i in range(n)]
    return pl.DataFrame(
        {
            "op_id": [pid * 100 + i for i in range(n)],
            "device_id": [0] * n,
            "pid": [pid] * n,
            "start_ns": [t + 10 for t in launches],
            "end_ns": [t + 110 for t in launches],
            "dur_ns": [100] * n,
            "launch_start_ns": launches,
            "step": pl.Series([None] * n, dtype=pl.Int64),
            "step_source": pl.Series([None] * n, dtype=pl.String),
            "phase": pl.Series([None] * n, dtype=pl.String),
            "phase_source": pl.Series([None] * n, dtype=pl.String),
            "warmup": [False] * n,
        }
    )


def _model_calls(ends: dict[int, int]) -> pl.DataFrame:
    """One outermost module call per process, from 0 to its end."""
    return pl.DataFrame(
        {
            "range_id": list(ends),
            "pid": list(ends),
            "tid": list(ends),
            "name": ["nn.Module: GPT_0 (GPT)"] * len(ends),
            "start_ns": [0] * len(ends),
            "end_ns": list(ends.values()),
            "depth": [1] * len(ends),
        },
        schema=SLIM,
    )


def _apart(ops: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    parts, _ = _by_process(ops, sorted(ops["pid"].unique().to_list()))
    return structure_in_parts(parts, ranges)


def test_each_process_has_passes_from_its_own_module_calls_however_the_other_is_covered():
    """Process 1's model call holds 9 of its 10 operations, process 2's 1 of 10: process 1
    has a forward pass of the call and process 2 none, read together or apart."""
    ops = pl.concat([_unranged(1), _unranged(2)])
    ranges = _model_calls({1: 8500, 2: 500})
    whole = build_structure(ops, ranges)
    passes = whole.filter(kind="pass")
    assert passes["pid"].to_list() == [1] and passes["evidence"][0] == "module_calls"
    assert _apart(ops, ranges).equals(whole)


def test_a_process_without_phases_has_module_call_passes_beside_one_with_phases():
    """Process 1's operations have phases (PyTorch's records), process 2's none and a model
    call around them: process 2's passes come from its call, read together or apart."""
    phased = _unranged(1).with_columns(
        phase=pl.Series(["forward"] * 5 + ["backward"] * 5), phase_source=pl.lit("records")
    )
    ops = pl.concat([phased, _unranged(2)])
    ranges = _model_calls({2: 9500})
    whole = build_structure(ops, ranges)
    mine = whole.filter(kind="pass", pid=2)
    assert mine["evidence"].to_list() == ["module_calls"] and mine["ops"].to_list() == [10]
    assert whole.filter(kind="pass", pid=1)["direction"].to_list() == ["forward", "backward"]
    assert _apart(ops, ranges).equals(whole)


def test_streamed_operations_are_read_a_process_at_a_time_when_asked(tmp_path: Path):
    """The flow's parts of rows streamed to ops.parquet: a generator, each process read from
    the file when the next is asked for, only the columns asked; held rows: one part."""
    from nsysmap.flow.run_stages import _processes
    from nsysmap.output.ops_sinks import HeldOps, OpsFile

    ops = pl.concat([_unranged(1), _unranged(2), _unranged(3)])
    ops.write_parquet(tmp_path / "ops.parquet")
    parts = _processes(OpsFile(tmp_path / "ops.parquet", ops.height))(COUNTED_COLUMNS)
    assert inspect.isgenerator(parts)
    read = list(parts)
    assert [p["pid"].unique().to_list() for p in read] == [[1], [2], [3]]
    assert all(p.columns == list(COUNTED_COLUMNS) for p in read)
    (held,) = _processes(HeldOps(ops))(COUNTED_COLUMNS)
    assert held.equals(ops.select(COUNTED_COLUMNS))


def test_no_part_is_no_structure():
    none = structure_in_parts(lambda columns: iter(()))
    assert none.is_empty() and none.schema == STRUCTURE
