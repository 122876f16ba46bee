"""Declared schemas of the inferred tables (nsysmap.infer), kept apart from measured
attribution: inferred.parquet, keyed by op_id, and by_inferred_block.parquet."""

from __future__ import annotations

import polars as pl

from nsysmap.core.schemas import declare

INFERRED = declare(
    {
        "op_id": pl.Int64,
        "device_id": pl.Int64,
        "inferred_step": pl.Int64,  # the pass: a training step or one forward pass
        "inferred_phase": pl.String,  # forward, backward, optimizer, data, other
        "inferred_region": pl.String,  # prefix, block, between, suffix; null: no blocks
        "inferred_block": pl.Int64,  # 0 .. L-1; null outside the repeated blocks
        "inferred_part": pl.Int64,  # position in the block's kernel motif
        "inferred_confidence": pl.Float64,  # of the op's block, else of its pass
    }
)
BY_INFERRED_BLOCK = declare(
    {
        "device_id": pl.Int64,
        "inferred_phase": pl.String,
        "inferred_region": pl.String,
        "inferred_block": pl.Int64,
        "ops": pl.Int64,
        "time_ns": pl.Int64,
        "time_share": pl.Float64,
        "confidence": pl.Float64,  # time-weighted mean of the ops' inferred_confidence
        "top_kernel": pl.String,  # short name of the kernel with most time in the group
    }
)
INFERRED_SCHEMAS = {"inferred": INFERRED, "by_inferred_block": BY_INFERRED_BLOCK}
