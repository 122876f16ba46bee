"""What the answers leave out, and why (nsysmap.report.answer_doc.left_out)."""

from __future__ import annotations

import polars as pl

from nsysmap.report.answer_doc import left_out


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
