"""What is left of each profile once its OPS chunks are out: what the flow keeps of it.

Of a profile read whole, the profile itself (released of its ranges and API
calls once the summaries are taken, when asked). Of parts read apart (processes,
time windows), only what the passes after the parts read, in small frames:
each part's by_range and input totals, its meta, threads and devices, and for
the waits its synchronisations and `.item()` ranges (threads and times) and its
operations' launch calls (the API name only where the waits read it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl

from nsysmap.core.profile import NestedProfile
from nsysmap.sources.by_process import merged_profile
from nsysmap.structure.ranges import merged, slim_ranges
from nsysmap.summaries.conservation import added_totals, input_totals
from nsysmap.waits.sync_rules import SYNC_API, SYNC_RANGE, matches
from nsysmap.waits.tables import is_sync_copy


@dataclass
class Leftovers:
    """What the flow keeps of each profile once its chunks are out."""

    apart: bool
    merged: Callable[[list[NestedProfile]], NestedProfile] = merged_profile
    by_range: list[pl.DataFrame] = field(default_factory=list)
    totals: list[pl.DataFrame] = field(default_factory=list)  # input_totals per profile
    profiles: list[NestedProfile] = field(default_factory=list)  # parts: without ops, ranges
    # Each profile's operations' launch calls as attribution joined them (`attribute_chunks`).
    launches: list[pl.DataFrame] = field(default_factory=list)
    # Read apart: each part's synchronisations and `.item()` ranges (what the waits read).
    waits: list[tuple[pl.DataFrame, pl.DataFrame]] = field(default_factory=list)
    # Each profile's ranges that can name or hold a region, step or pass (nsysmap.structure).
    structure_ranges: list[pl.DataFrame] = field(default_factory=list)

    def add(self, profile: NestedProfile, ranges_summary: pl.DataFrame) -> None:
        self.by_range.append(ranges_summary)
        self.structure_ranges.append(slim_ranges(profile.ranges))
        self.totals.append(input_totals(profile.ops))
        if self.apart:
            self.waits.append(host_waits_of(profile))
            if self.launches:
                self.launches[-1] = slim_launches(self.launches[-1])
        self.profiles.append(profile.released(ops=False) if self.apart else profile)

    def ranges(self) -> pl.DataFrame:
        """The ranges the structure model reads, of every profile (nsysmap.structure)."""
        return merged(self.structure_ranges)

    def input_totals(self) -> pl.DataFrame:
        return self.totals[0] if len(self.totals) == 1 else added_totals(self.totals)

    def profile(self, release: bool) -> NestedProfile:
        if self.apart:
            return self.merged(self.profiles)
        return self.profiles[0].released() if release else self.profiles[0]

    def waits_context(self) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame | None]:
        """The API calls, ranges and launch calls the waits read: the whole profile's,
        or, read apart, the parts' synchronisations, `.item()` ranges and launches
        (all that the waits read of them, docs/waits.md)."""
        if not self.apart:
            first = self.profiles[0]
            return first.api_calls, first.ranges, self.launches[0]
        calls = pl.concat([calls for calls, _ in self.waits], rechunk=False)
        ranges = pl.concat([ranges for _, ranges in self.waits], rechunk=False)
        launches = pl.concat(self.launches, rechunk=False) if self.launches else None
        return calls, ranges, launches


def host_waits_of(part: NestedProfile) -> tuple[pl.DataFrame, pl.DataFrame]:
    """What the waits read of a part's API calls and ranges: its synchronisations and
    `.item()` ranges, only the columns they read (launching thread and times)."""
    columns = ["pid", "tid", "start_ns", "end_ns"]
    calls = part.api_calls.filter(matches("api_name", SYNC_API))
    ranges = part.ranges.filter(matches("name", SYNC_RANGE))
    return calls.select("api_name", *columns), ranges.select("name", *columns)


def slim_launches(launches: pl.DataFrame) -> pl.DataFrame:
    """A part's launch calls (`attribute_chunks`'s `launches`) as the waits read them:
    the API name kept only where it is a synchronous copy (`is_sync_copy`: all that
    the waits read of it), null elsewhere, so that no part's API names stay alive."""
    api = pl.col("launch_api")
    return launches.with_columns(pl.when(is_sync_copy(api)).then(api).otherwise(None))
