"""Declared schemas of the tables of several profiles at once, the ranks of one job.

`nsysmap attribute` on several profiles (nsysmap.many): every summary table
gains a leading `rank` (`with_rank`); these tables compare the ranks
(docs/outputs.md).
"""

from __future__ import annotations

import polars as pl

from nsysmap.core.schemas import declare


def with_rank(schema: pl.Schema) -> pl.Schema:
    """`schema` with a leading `rank` column."""
    return declare({"rank": pl.Int64, **schema})


RANKS = declare(
    {
        "rank": pl.Int64,
        "input": pl.String,  # the profile's file
        "pid": pl.Int64,
        "device_ids": pl.List(pl.Int64),
        "rank_source": pl.String,  # declared, process, file_order
        "declared_rank": pl.Int64,  # what the profile itself said, if anything
        "ops": pl.Int64,
        "time_ns": pl.Int64,
    }
)
RANK_STEPS = declare(
    {
        "rank": pl.Int64,
        "step": pl.Int64,
        "ops": pl.Int64,
        "time_ns": pl.Int64,
        "comm_ns": pl.Int64,  # communication operations
        "compute_ns": pl.Int64,  # everything else
        "first_start_ns": pl.Int64,
        "last_end_ns": pl.Int64,
        "span_ns": pl.Int64,
        "collective_wait_ns": pl.Int64,  # comm_ns minus the least of any rank in this step
    }
)
STRAGGLERS = declare(
    {
        "step": pl.Int64,
        "ranks": pl.Int64,
        "slowest_rank": pl.Int64,
        "fastest_rank": pl.Int64,
        "slowest_compute_ns": pl.Int64,
        "median_compute_ns": pl.Float64,
        "fastest_compute_ns": pl.Int64,
        "straggler_cost_ns": pl.Int64,  # the fastest rank's collective wait
    }
)
RANK_MODULE_PHASE = declare(
    {
        "module": pl.String,
        "module_class": pl.String,
        "phase": pl.String,
        "ranks": pl.Int64,
        "min_ns": pl.Int64,
        "median_ns": pl.Float64,
        "max_ns": pl.Int64,
        "slowest_rank": pl.Int64,
        "fastest_rank": pl.Int64,
        "excess_ns": pl.Float64,  # max_ns - median_ns
    }
)
RANK_MODULE = declare(
    {
        "module": pl.String,
        "module_class": pl.String,
        **{
            k: v
            for k, v in RANK_MODULE_PHASE.items()
            if k not in ("module", "module_class", "phase")
        },
    }
)
RANK_COMM = declare(
    {
        "rank": pl.Int64,
        "ops": pl.Int64,
        "time_ns": pl.Int64,
        "compute_ns": pl.Int64,
        "comm_ns": pl.Int64,  # sum of communication operations' durations
        "comm_busy_ns": pl.Int64,  # time with at least one communication operation running
        "overlapped_ns": pl.Int64,  # ... while another operation runs on the same device
        "exposed_ns": pl.Int64,  # ... while nothing else runs on the device
        "collective_wait_ns": pl.Int64,  # summed over steps (rank_steps)
    }
)
