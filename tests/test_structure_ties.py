"""Ranges of two threads that tie (same start and depth) hold passes in one order,
whatever the order or ids they were read with (nsysmap.structure.ranges.containing)."""

from __future__ import annotations

import polars as pl

from nsysmap.attribution.rules import BUILTIN
from nsysmap.structure.evidence import range_steps
from nsysmap.structure.model import _setup_name
from nsysmap.structure.ranges import SLIM, containing, labelled
from nsysmap.structure.regions import grouped


def _ranges(first: str, second: str) -> pl.DataFrame:
    """Two long ranges on threads 11 and 12 with the same start and end, ids in row order."""
    return pl.DataFrame(
        {
            "range_id": [1, 2],
            "pid": [7, 7],
            "tid": [11, 12],
            "name": [first, second],
            "start_ns": [0, 0],
            "end_ns": [10_000, 10_000],
            "depth": [1, 1],
        },
        schema=SLIM,
    )


def _passes() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "dev": [0, 0, 0],
            "pid": [7, 7, 7],
            "start_ns": [100, 300, 500],
            "end_ns": [200, 400, 600],
            "direction": ["forward"] * 3,
            "warm": [False] * 3,
        }
    )


def test_tied_holders_come_in_one_order_whichever_thread_was_read_first():
    names = ("pin_memory", "ProcessGroupNCCL::watchdog")
    one = labelled(_ranges(*names), BUILTIN)
    other = labelled(_ranges(*reversed(names)), BUILTIN)
    spans = _passes().with_row_index("span").with_columns(pl.col("span").cast(pl.Int64))
    held_one, held_other = containing(spans, one), containing(spans, other)
    assert held_one.height == held_other.height == 6
    assert held_one.drop("range_id").equals(held_other.drop("range_id"))
    assert held_one["name"].head(2).to_list() == sorted(names)
    grouped_one, grouped_other = grouped(_passes(), one), grouped(_passes(), other)
    assert grouped_one["h_name"].to_list() == [min(names)] * 3
    assert grouped_one.equals(grouped_other)


def test_of_two_set_up_ranges_as_long_the_first_by_name_names_the_set_up():
    names = ("load_weights", "compile_model")
    for order in (names, tuple(reversed(names))):
        ranges = labelled(_ranges(*order), BUILTIN)
        assert _setup_name(ranges, 7, 0, 20_000) == "compile_model"


def test_of_two_tied_ranges_holding_a_step_the_first_by_name_names_it():
    passes = pl.DataFrame(
        {
            "dev": [0, 0],
            "pid": [7, 7],
            "start_ns": [100, 500],
            "end_ns": [200, 600],
            "direction": ["forward", "backward"],
            "warm": [False, False],
        }
    )
    names = ("beta_step", "alpha_step")
    for order in (names, tuple(reversed(names))):
        for _ in range(5):  # the order of a group_by varies from run to run
            steps = range_steps(passes, labelled(_ranges(*order), BUILTIN))
            assert steps["name"].to_list() == ["alpha_step"]
