"""From what a reader returns to the normalised report attribution expects.

Readers leave range nesting empty; this step adds synthetic spans for FSDP's
paired hook ranges, fills `depth` and `parent_id`, and records in `meta` how
many ranges had to be clipped because they crossed their parent.
"""

from __future__ import annotations

import polars as pl

from nsysmap.attribution.labels import fsdp_spans
from nsysmap.attribution.nesting import nest_ranges
from nsysmap.model import Report


def normalise(raw: Report) -> Report:
    """The report with FSDP spans added and ranges nested (pure)."""
    ranges = raw.ranges
    first_id = int(ranges["range_id"].max() or 0) + 1 if ranges.height else 0
    spans = fsdp_spans(ranges, first_id)
    nested, n_clipped = nest_ranges(pl.concat([ranges, spans]) if spans.height else ranges)
    facts = pl.DataFrame(
        {
            "key": ["ranges_clipped_to_parent", "synthetic_fsdp_spans"],
            "value": [str(n_clipped), str(spans.height)],
        }
    )
    meta = pl.concat([raw.meta.filter(~pl.col("key").is_in(facts["key"].implode())), facts])
    return Report(
        gpu_ops=raw.gpu_ops,
        api_calls=raw.api_calls,
        ranges=nested,
        threads=raw.threads,
        devices=raw.devices,
        meta=meta,
    ).checked()
