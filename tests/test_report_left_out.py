"""What the answers leave out, and why (nsysmap.report.answer_doc.left_out)."""

from __future__ import annotations

import polars as pl

from nsysmap.report.answer_doc import left_out
from nsysmap.report.brief import brief_copies
from nsysmap.report.left_out import left_out_of
from nsysmap.report.questions import copies
from nsysmap.structure.table import STRUCTURE as STRUCTURE_SCHEMA

STRUCTURE = pl.DataFrame(schema=STRUCTURE_SCHEMA)


def test_work_launched_before_the_capture_is_named_apart_from_set_up_work():
    """Outside every step: work without a launch call in a process whose other work has
    one ran from before the capture (the tail of an earlier step), not set-up work."""
    ops = pl.DataFrame(
        {
            "pid": [1, 1, 1, 1],
            "step": [None, None, 0, 0],
            "phase": ["backward", None, "forward", "backward"],
            "launch_start_ns": [None, 5, 10, 20],
            "dur_ns": [7, 3, 40, 50],
            "warmup": [False] * 4,
        },
        schema_overrides={"step": pl.Int64, "phase": pl.String, "launch_start_ns": pl.Int64},
    )
    rows = {row["what"]: row["time_ns"] for row in left_out(ops)}
    assert rows == {"work launched before the capture": 7, "work outside every step": 3}
    # a process without any launch call (a trace of GPU work alone): nothing is "before"
    bare = ops.with_columns(launch_start_ns=pl.lit(None, pl.Int64))
    assert {row["what"] for row in left_out(bare)} == {"work outside every step"}


def test_before_the_capture_asks_the_whole_process_not_only_what_is_left_out():
    """A process whose launched work is all measured, and whose work without a launch call
    lies in no region (the GPU ran it as the capture began): that work was launched before
    the capture, not "between the measured steps". The question is asked of the process's
    every operation; asked of the left-out operations alone, they had no launched
    neighbour (fastvideo's device 0: 16 operations, 9.338 ms, were said to be between
    steps of a profile without steps)."""
    ops = pl.DataFrame(
        {
            "pid": [1, 1, 2, 2],
            "kind": ["kernel"] * 4,
            "name": ["a", "b", "c", "d"],
            "launch_start_ns": [None, 10, None, 12],
            "dur_ns": [7, 40, 5, 30],
            "warmup": [False] * 4,
            "step": [None] * 4,
            "s_region": [None, "measured", None, "measured"],
            "s_step_region": [None] * 4,
            "s_pass": [None, 0, None, 1],
            "s_direction": [None, "forward", None, "forward"],
            "s_pass_region": [None, "measured", None, "measured"],
        },
        schema_overrides={
            "launch_start_ns": pl.Int64,
            "step": pl.Int64,
            "s_region": pl.String,
            "s_step_region": pl.String,
            "s_pass": pl.Int64,
            "s_direction": pl.String,
            "s_pass_region": pl.String,
        },
    )
    rows = {row["what"]: row["time_ns"] for row in left_out_of(ops, STRUCTURE)}
    assert rows == {"work launched before the capture": 7 + 5}


def test_copies_name_where_unplaced_ones_ran():
    """The copies' regions: one launched before the capture, one outside every region;
    no placeholder."""
    ops = pl.DataFrame(
        {
            "pid": [1, 1, 1],
            "kind": ["memcpy", "memcpy", "kernel"],
            "name": ["[CUDA memcpy DtoD]"] * 2 + ["k"],
            "launch_start_ns": [None, 5, 10],
            "dur_ns": [7, 3, 40],
            "step": [None, None, None],
            "s_region": [None, None, "measured"],
            "s_step_region": [None, None, None],
            "warmup": [False] * 3,
        },
        schema_overrides={
            "launch_start_ns": pl.Int64,
            "step": pl.Int64,
            "s_region": pl.String,
            "s_step_region": pl.String,
        },
    )
    answer = copies(ops)
    assert answer["rows"][0]["regions_ns"] == {"before_capture": 7, "outside": 3}
    said = brief_copies(answer)
    assert "0.000 ms launched before the capture, 0.000 ms outside the structure's regions" in said
    assert "(none)" not in said
