"""Where the GPU waits: each stream's idle gaps per step, and what the host was doing (pure).

Per device, stream and step, the step's *wall time* is the device's window
for that step (its first GPU operation's start to its last one's end, all
streams). A stream is *busy* while one of its operations runs (the union
of their intervals) and *idle* the rest of the window; each idle stretch is
one gap, given to the operation that ends it (the *next* kernel) and one
kind (nsysmap.core.wait_schemas.WAIT_KINDS, docs/waits.md):

* `before_first` / `after_last`: before the stream's first, after its last
  operation of the step (the window's edges; `after_last` has no next kernel);
* `sync`: the next kernel's launch call started after the gap began (the
  host was late) and the thread that made that call was blocked in a
  synchronisation between the gap's start and the call (nsysmap.waits.sync_rules);
* `launch`: the host was late otherwise: launch-bound;
* `other_stream`: launched in time, and work ran on another stream of the
  device during the gap (a cross-stream wait, communication);
* `latency`: launched in time and nothing else ran: the GPU's own latency
  between operations (a few microseconds), up to LATENCY_MAX_NS;
* `unknown`: nothing the profile holds explains it: the next kernel has no
  launch call, or it was launched in time, nothing else ran, and the gap is
  longer than the GPU's latency (an event or a host function the stream
  waited for, a graph's own dependencies).

busy + idle = wall for every row of `stream_idle`, to the nanosecond.
"""

from __future__ import annotations

import polars as pl

from nsysmap.core.wait_schemas import LATENCY_MAX_NS, WaitKind
from nsysmap.intervals.packed_sort import packed_order
from nsysmap.waits.sync_rules import SYNC_API, SYNC_RANGE, matches

GPU = (pl.col("kind") != "cpu_op") & (pl.col("device_id") >= 0)
GROUP = ["device_id", "stream_id", "step"]
WINDOW = ["device_id", "step"]
# The next operation's columns a gap carries (its range_path is joined at the end: long
# strings are not sorted along).
NEXT = {"op_id": "next_op_id", "phase": "phase", "module": "module"}
# The launching thread: a synchronisation blocks the thread that makes it.
THREAD = ["pid", "tid"]
COLUMNS = [*GROUP, *THREAD, "correlation_id", "start_ns", "end_ns", "launch_start_ns", *NEXT]


def gpu_ops(ops: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """The GPU operations of an OPS frame (no CPU operators), with what the waits read,
    sorted by device, stream, step, start, end and op_id."""
    gpu = ops.lazy().filter(GPU).select(COLUMNS).collect()
    order = packed_order(gpu, GROUP, "start_ns", ["end_ns", "op_id"])
    if order is None:
        return gpu.sort([*GROUP, "start_ns", "end_ns", "op_id"], nulls_last=True)
    return gpu[order]


def reaching(intervals: pl.DataFrame | pl.LazyFrame, by: str | list[str]) -> pl.DataFrame:
    """`intervals` (start_ns, end_ns) per `by`, sorted by start, each end_ns replaced by
    the furthest end of the intervals so far: the last row starting before a time
    reaches as far as any interval that starts before it."""
    keys = [by] if isinstance(by, str) else by
    rows = intervals.lazy().select(*keys, "start_ns", "end_ns").drop_nulls().collect()
    order = packed_order(rows, keys, "start_ns", ["end_ns"])  # any order of equal starts
    rows = rows.sort(*keys, "start_ns") if order is None else rows[order]
    return rows.with_columns(pl.col("end_ns").cum_max().over(by))


def host_waits(api_calls: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """Per thread (pid, tid), the intervals in which it was blocked in a
    synchronisation (`reaching`)."""
    calls = api_calls.lazy().filter(matches("api_name", SYNC_API))
    reads = ranges.lazy().filter(matches("name", SYNC_RANGE))
    both = pl.concat([f.select(*THREAD, "start_ns", "end_ns") for f in (calls, reads)])
    return reaching(both, THREAD)


def with_reach(gpu: pl.DataFrame) -> pl.DataFrame:
    """`gpu` (sorted as `gpu_ops` sorts) with each operation's `reach` (the latest end of
    its stream's operations so far in the step) and `prev_reach` (the one before it)."""
    # Sorted by GROUP, a group's rows are one run: windows over the run's number hash
    # one integer, not three columns (0.11 CPU s of 10^6 operations, 0.035 by runs).
    run = gpu.select(pl.struct(GROUP).rle_id()).to_series().alias("_run")
    reach = gpu.with_columns(reach=pl.col("end_ns").cum_max().over(run))
    return reach.with_columns(prev_reach=pl.col("reach").shift(1).over(run))


def windows(gpu: pl.DataFrame) -> pl.DataFrame:
    """Each device's wall-time window per step: wall_start_ns, wall_end_ns."""
    return gpu.group_by(WINDOW).agg(
        wall_start_ns=pl.col("start_ns").min(), wall_end_ns=pl.col("end_ns").max()
    )


def windows_overlap(stream_idle: pl.DataFrame) -> pl.DataFrame:
    """(device_id, overlap_ns): per device, how much its steps' windows overlap, the time
    in two windows or more (their summed length less their union). Steps run in a
    pipeline overlap: a step's operations run on after the next step's first begins,
    and the waits count that time in each window::

        step 550   |---------------------|
        step 551                 |--------------------|     overlap: |------|
    """
    rows = stream_idle.filter(pl.col("step").is_not_null())
    spans = rows.select(*WINDOW, start="wall_start_ns", end="wall_end_ns").unique()
    spans = spans.sort("device_id", "start", "end")
    reach = pl.col("end").cum_max().shift(1).over("device_id")
    piece = (pl.col("end") - pl.max_horizontal("start", reach)).clip(lower_bound=0)
    covered = pl.when(reach.is_null()).then(pl.col("end") - pl.col("start")).otherwise(piece)
    return spans.group_by("device_id").agg(
        overlap_ns=((pl.col("end") - pl.col("start")) - covered).sum().cast(pl.Int64)
    )


def interior_gaps(reached: pl.DataFrame) -> pl.DataFrame:
    """The gaps between one operation's reach and the next operation's start, not yet kinded."""
    return reached.filter(pl.col("start_ns") > pl.col("prev_reach")).select(
        *GROUP,
        *THREAD,
        "launch_start_ns",
        pl.col("prev_reach").alias("start_ns"),
        pl.col("start_ns").alias("end_ns"),
        *(pl.col(c).alias(n) for c, n in NEXT.items()),
    )


def edge_gaps(reached: pl.DataFrame, window: pl.DataFrame) -> pl.DataFrame:
    """The `before_first` and `after_last` gaps of every stream and step."""
    ends = reached.group_by(GROUP, maintain_order=True).agg(
        first_ns=pl.col("start_ns").first(),
        last_ns=pl.col("reach").last(),
        **{n: pl.col(c).first() for c, n in NEXT.items()},
    )
    ends = ends.join(window, on=WINDOW, how="left", nulls_equal=True)
    before = ends.filter(pl.col("first_ns") > pl.col("wall_start_ns")).select(
        *GROUP,
        pl.col("wall_start_ns").alias("start_ns"),
        pl.col("first_ns").alias("end_ns"),
        pl.lit("before_first", WaitKind).alias("kind"),
        *NEXT.values(),
    )
    after = ends.filter(pl.col("wall_end_ns") > pl.col("last_ns")).select(
        *GROUP,
        pl.col("last_ns").alias("start_ns"),
        pl.col("wall_end_ns").alias("end_ns"),
        pl.lit("after_last", WaitKind).alias("kind"),
        *(pl.lit(None, before.schema[n]).alias(n) for n in NEXT.values()),
    )
    return pl.concat([before, after])


def overlapped(
    gaps: pl.DataFrame, intervals: pl.DataFrame, by: str | list[str], end: pl.Expr | None = None
) -> pl.Series:
    """Per gap: does one of `intervals` (as `reaching` gives them, per `by`) overlap
    [start_ns, `end`) (`end` None: end_ns)?

    The last row starting before `end` reaches as far as any interval that
    starts before it; the gap is overlapped when that reach is past its start.
    """
    if gaps.is_empty() or intervals.is_empty():
        return pl.Series("hit", [False] * gaps.height, pl.Boolean)
    end = pl.col("end_ns") if end is None else end
    keys = [by] if isinstance(by, str) else by
    probe = gaps.select(*keys, "start_ns", _probe=end - 1).with_row_index("_row")
    right = intervals.select(*keys, _start=pl.col("start_ns"), _end=pl.col("end_ns"))
    hit = probe.sort("_probe").join_asof(
        right.sort("_start"),
        left_on="_probe",
        right_on="_start",
        by=keys,
        strategy="backward",
        check_sortedness=False,  # sorted by `by`, then start: disjoint within each `by`
    )
    found = (pl.col("_end") > pl.col("start_ns")).fill_null(False)
    return hit.sort("_row").select(found.alias("hit")).to_series()


def kinded(gaps: pl.DataFrame, busy: pl.DataFrame, waits: pl.DataFrame) -> pl.DataFrame:
    """Interior `gaps` with their kind: `busy` is every device's GPU operations
    (`reaching`, by device_id), `waits` the host's synchronisations (`host_waits`, by thread)."""
    late = pl.col("launch_start_ns") > pl.col("start_ns")
    unlaunched = pl.col("launch_start_ns").is_null()
    kind = (
        pl.when((late | unlaunched) & pl.col("_sync"))
        .then(pl.lit("sync"))
        .when(late)
        .then(pl.lit("launch"))
        .when(pl.col("_other"))
        .then(pl.lit("other_stream"))
        .when(unlaunched | (pl.col("end_ns") - pl.col("start_ns") > LATENCY_MAX_NS))
        .then(pl.lit("unknown"))
        .otherwise(pl.lit("latency"))
    )
    # The host's waits before it made the next launch call (that call itself may block:
    # a plain cudaMemcpy is both the launch and a synchronisation).
    until_launch = pl.min_horizontal("end_ns", "launch_start_ns")
    marked = gaps.with_columns(
        _sync=overlapped(gaps, waits, THREAD, until_launch),
        _other=overlapped(gaps, busy, "device_id"),
    )
    return marked.with_columns(kind=kind.cast(WaitKind)).drop("_sync", "_other")
