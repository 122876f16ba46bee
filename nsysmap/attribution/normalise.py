"""The normalise stage: from a reader's `Profile` to the `NestedProfile` attribution takes.

Readers leave range nesting empty, and ranges that were never closed without
an end; this step (`normalise`, the only function that makes a NestedProfile)
closes those, adds synthetic spans for FSDP's paired hook
ranges, fills `depth` and `parent_id`, and records in `meta` how many ranges
were closed and how many had to be clipped because they crossed their parent.
"""

from __future__ import annotations

import polars as pl

from nsysmap.attribution.labels import fsdp_spans
from nsysmap.core.errors import DamagedTimes
from nsysmap.core.profile import NestedProfile, Profile
from nsysmap.core.scalars import to_int
from nsysmap.intervals.nesting import close_open_ranges, nest_ranges


def normalise(raw: Profile) -> NestedProfile:
    """The profile with open ranges closed, FSDP spans added and ranges nested (pure).

    Raises DamagedTimes when an operation's times are unusable (see
    `check_op_times`), or a range or API call ends before it starts
    (`check_span_times`).
    """
    source = raw.meta_value("source_path") or "profile"
    check_op_times(raw.ops, source)
    check_span_times(raw.ranges, raw.api_calls, source)
    ranges = raw.ranges
    first_id = to_int(ranges["range_id"].max() or 0) + 1 if ranges.height else 0
    spans = fsdp_spans(ranges, first_id)
    # Open ranges are closed with the spans in place, so none crosses a span.
    closed, n_open = close_open_ranges(
        pl.concat([ranges, spans]) if spans.height else ranges, raw.api_calls
    )
    nested, n_clipped = nest_ranges(closed)
    facts = pl.DataFrame(
        {
            "key": ["ranges_open_at_end", "ranges_clipped_to_parent", "synthetic_fsdp_spans"],
            "value": [str(n_open), str(n_clipped), str(spans.height)],
        }
    )
    meta = pl.concat([raw.meta.filter(~pl.col("key").is_in(facts["key"].implode())), facts])
    return NestedProfile(
        ops=raw.ops,
        api_calls=raw.api_calls,
        ranges=nested,
        threads=raw.threads,
        devices=raw.devices,
        meta=meta,
        graph_links=raw.graph_links,
    ).checked()


MAX_TOTAL_NS = (1 << 63) - 1


def check_op_times(ops: pl.DataFrame, source: str) -> None:
    """Refuse operations without a usable duration, and devices whose total overflows.

    An operation needs a start and an end (not NULL, not text), the end not
    before the start, and `dur_ns = end - start` (for CPU operators, a self
    time of at least 0). Each device's summed
    duration must fit the 64-bit totals of the output tables: a sum beyond
    2^63 - 1 ns (292 years) means corrupt times, never a real profile.
    """
    start, end, dur = pl.col("start_ns"), pl.col("end_ns"), pl.col("dur_ns")
    own = pl.col("kind") == "cpu_op"  # a CPU operator's dur_ns is its self time
    usable = (end >= start) & (dur >= 0) & (own | (dur == end - start))
    bad = ops.filter(~usable.fill_null(False))
    if bad.height:
        first = bad.row(0, named=True)
        raise DamagedTimes(
            f"{source}: {bad.height:,} GPU operation{'s' * (bad.height != 1)} without a usable "
            f"duration (start {first['start_ns']}, end {first['end_ns']} for {first['kind']} "
            f"{_short(first['name'])}): a missing or non-numeric time, or an end before the "
            "start; the export is damaged"
        )
    totals = ops.group_by("device_id").agg(total=dur.cast(pl.Int128).sum())
    over = totals.filter(pl.col("total") > MAX_TOTAL_NS)
    if over.height:
        device = over.row(0, named=True)
        longest = ops.filter(pl.col("device_id").eq_missing(device["device_id"]))
        worst = longest.sort("dur_ns", descending=True).row(0, named=True)
        raise DamagedTimes(
            f"{source}: device {device['device_id']}'s GPU time adds up to more than 2^63-1 ns "
            f"(292 years), which no capture holds: corrupt times (longest: {worst['kind']} "
            f"{_short(worst['name'])}, {worst['dur_ns']:,} ns)"
        )


def check_span_times(ranges: pl.DataFrame, api_calls: pl.DataFrame, source: str) -> None:
    """Refuse ranges and API calls that end before they start (a damaged export).

    Such a span has no place in a nesting and no guess at its true times is
    safe (swapping them, or dropping the span, would attribute operations to
    ranges the capture never had), so the input is refused with how many
    there are. An end that is missing (a range left open) is not checked
    here: normalising closes it.
    """
    for frame, what in ((ranges, "NVTX range"), (api_calls, "runtime API call")):
        reversed_ = frame.filter(pl.col("end_ns") < pl.col("start_ns"))
        if reversed_.height:
            n, first = reversed_.height, reversed_.row(0, named=True)
            count = (
                f"{n:,} {what}s end before they start"
                if n > 1
                else f"1 {what} ends before it starts"
            )
            name = first.get("name", first.get("api_name"))
            raise DamagedTimes(
                f"{source}: {count} (first: {_short(name)}, start {first['start_ns']}, "
                f"end {first['end_ns']}); the export is damaged"
            )


def _short(name: str | None, limit: int = 60) -> str:
    text = repr(name) if name is not None else "(unnamed)"
    return text if len(text) <= limit else text[: limit - 1] + "…"
