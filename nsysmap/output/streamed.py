"""Attributing a large report block by block, writing ops.parquet as it goes.

For reports with millions of GPU operations, holding every OPS row (with its
range path) next to the report would double the memory. Here the ranges are
searched once for all operations (`attribute_blocks`), then each block of
rows is materialised, summarised (partial sums) and handed to Polars'
streaming Parquet writer, and dropped:

    report ──> locate (all ops) ──> block 1 ──> ops.parquet (row groups)
                                    block 2 ──>     "        + partial summaries
                                    ...                         └─> summaries

The rows written are exactly those `attribute(report)` returns.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
from polars.io.plugins import register_io_source

from nsysmap import schemas
from nsysmap.attribution.attribute import attribute_blocks
from nsysmap.attribution.rules import BUILTIN, NameRules
from nsysmap.model import NestedReport
from nsysmap.output.summarize import (
    Summaries,
    combine_summaries,
    partial_summaries,
    with_overlap,
)
from nsysmap.output.writer import PARQUET
from nsysmap.stages import Stages

BLOCK_ROWS = 250_000  # OPS rows materialised at a time (more: a higher peak, no faster)


def stream_ops(
    report: NestedReport, target: Path, stages: Stages, rules: NameRules = BUILTIN
) -> tuple[int, Summaries]:
    """Write the OPS rows of `report` to `target`; returns their number and the summaries.

    Adds the time spent to `stages` as "attribute", "summarise" and "write".
    """
    parts: list[dict[str, pl.DataFrame]] = []
    spent = {"attribute": 0.0, "summarise": 0.0}

    def blocks(*_: object) -> Iterator[pl.DataFrame]:
        rows = attribute_blocks(report, block_rows=BLOCK_ROWS, rules=rules)
        while True:
            start = time.perf_counter()
            block = next(rows, None)
            middle = time.perf_counter()
            spent["attribute"] += middle - start
            if block is None:
                return
            parts.append(partial_summaries(block))
            spent["summarise"] += time.perf_counter() - middle
            yield block

    target.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with stages.stage("stream", "attributing and writing"):
        register_io_source(io_source=blocks, schema=schemas.OPS).sink_parquet(target, **PARQUET)
    total = time.perf_counter() - start
    stages.timings.pop("stream", None)
    for name, seconds in spent.items():
        stages.add(name, seconds)
    stages.add("write", total - sum(spent.values()))
    with stages.stage("summarise", "summarising"):
        summaries = with_overlap(combine_summaries(parts, report.ranges), pl.scan_parquet(target))
    rows = int(summaries.coverage["ops"].sum())
    return rows, summaries
