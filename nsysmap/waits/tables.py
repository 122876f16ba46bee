"""The waits tables of an OPS frame: idle, stream_idle and launch_cost (pure).

`waits_tables` takes the attributed operations (held, or scanned from a
staged ops.parquet), the profile's API calls (synchronisations, and
launch-call durations unless given) and its ranges (`.item()` operator
ranges). The launch calls' durations come from the attribution, which joined
every operation with its launch call already (`launches`;
nsysmap.attribution.attribute.launch_durations); without them they are
joined again here (`rejoined_launches`). The gaps and their kinds are
defined in nsysmap.waits.gaps.
"""

from __future__ import annotations

import polars as pl

from nsysmap.core.coded import lexical_rank
from nsysmap.core.scalars import opt_int
from nsysmap.core.wait_schemas import (
    IDLE,
    LAUNCH_COST,
    STREAM_IDLE,
    WAIT_INTERIOR,
    WAIT_KINDS,
    WaitKind,
)
from nsysmap.waits import gaps as g

SCHEMAS = {"idle": IDLE, "stream_idle": STREAM_IDLE, "launch_cost": LAUNCH_COST}
OWNER = ["device_id", "step", "phase", "module"]  # launch_cost's keys
COPY_CALL = r"(?i)^(?:cuda|cu|hip)mem(?:cpy|set)"  # and not `...Async`: synchronous
# An operation's launch call: the columns `launches` holds (`rejoined_launches`).
CALL_KEY = ["pid", "correlation_id", "launch_start_ns"]


def empty_waits() -> dict[str, pl.DataFrame]:
    """Every waits table, empty."""
    return {name: pl.DataFrame(schema=schema) for name, schema in SCHEMAS.items()}


def waits_tables(
    ops: pl.DataFrame | pl.LazyFrame,
    api_calls: pl.DataFrame,
    ranges: pl.DataFrame,
    launches: pl.DataFrame | None = None,
) -> dict[str, pl.DataFrame]:
    """idle, stream_idle and launch_cost of the GPU operations of `ops`.

    `launches`: each operation's launch call (`rejoined_launches`'s columns) as
    the attribution found it; None: joined again from `api_calls`.
    """
    gpu = g.gpu_ops(ops)
    if gpu.is_empty():
        return empty_waits()
    reached = g.with_reach(gpu)
    window = g.windows(gpu)
    idle = with_paths(idle_table(reached, window, g.host_waits(api_calls, ranges)), ops)
    if launches is None:
        launches = rejoined_launches(gpu, api_calls)
    return {
        "idle": idle,
        "stream_idle": stream_idle(reached, window, idle),
        "launch_cost": launch_cost(gpu, launches, idle),
    }


def window_waits(ops: pl.DataFrame, idle: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(STREAM_IDLE rows, the gaps they sum) of the GPU operations of `ops` (a part of a
    capture, such as its measured region) as one window per device, from the written
    tables alone. The gaps: device_id, stream_id, step (null), kind, start_ns, end_ns,
    dur_ns.

    Each device's window runs from its first operation in `ops` to its last
    end, and each stream's gaps in it are found as `waits_tables` finds them
    (`step` is set aside: null). An interior gap takes the kind of the same gap
    in `idle` (the capture's IDLE rows: the same next operation and the same
    start), whose kinds read the host's synchronisations, which the outputs do
    not hold; a gap the capture does not have (work of its stream left out of
    `ops` lies in it, or the next operation began a step there) is `unknown`::

        capture  |--a--|  sync  |--b--|  launch  |--c--|
        ops           b and c:   window [b.start, c.end], one gap before c: launch
    """
    gpu = g.gpu_ops(ops.lazy().with_columns(step=pl.lit(None, pl.Int64)))
    if gpu.is_empty():
        return pl.DataFrame(schema=STREAM_IDLE), pl.DataFrame(schema=IDLE)
    reached = g.with_reach(gpu)
    window = g.windows(gpu)
    same = ["next_op_id", "start_ns"]  # the same gap: ended by the same operation, as long
    known = idle.filter(pl.col("kind").is_in(WAIT_INTERIOR)).select(*same, "kind")
    inner = g.interior_gaps(reached).join(known.unique(same, keep="first"), on=same, how="left")
    inner = inner.with_columns(pl.col("kind").fill_null("unknown").cast(WaitKind))
    rows = pl.concat(
        [inner.drop(*g.THREAD, "launch_start_ns"), g.edge_gaps(reached, window)], how="diagonal"
    )
    rows = rows.with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns"))
    return stream_idle(reached, window, rows), rows


def long_gaps(gaps: pl.DataFrame, kind: str, longer_than_ns: int) -> pl.DataFrame:
    """(device_id, stream_id, long_ns): per stream of `gaps` (IDLE rows), the summed
    duration of its gaps of `kind` longer than `longer_than_ns` (0 where none)::

        stream 7   launch 0.1 ms, launch 3 ms, sync 5 ms   (longer than 0.25 ms)
        ->         device 0, stream 7, long_ns 3 ms
    """
    long = (pl.col("kind") == kind) & (pl.col("dur_ns") > longer_than_ns)
    summed = pl.col("dur_ns").filter(long).sum().cast(pl.Int64)
    return gaps.group_by("device_id", "stream_id").agg(long_ns=summed)


def rejoined_launches(gpu: pl.DataFrame, api_calls: pl.DataFrame) -> pl.DataFrame:
    """(op_id, pid, correlation_id, launch_start_ns, launch_ns, launch_api) of the
    operations of `gpu` with a launch call, joined from `api_calls` on (pid,
    correlation_id, launch_start_ns); of calls sharing an operation's key, the first
    one counts. The attribution hands over the same columns
    (nsysmap.attribution.attribute.launch_durations)."""
    calls = api_calls.select(
        "pid",
        "correlation_id",
        launch_start_ns="start_ns",
        launch_ns=pl.col("end_ns") - pl.col("start_ns"),
        launch_api="api_name",
    )
    launched = gpu.select("op_id", *CALL_KEY).join(calls, on=CALL_KEY, how="inner")
    launched = launched.unique("op_id", keep="first", maintain_order=True)
    return launched.select("op_id", *CALL_KEY, "launch_ns", "launch_api")


def call_facts(launches: pl.DataFrame) -> pl.DataFrame:
    """(op_id, launch_ns, call_first, compared) from `launches` (`rejoined_launches`).

    One call may launch many operations (a CUDA graph launch, its nodes traced
    one by one): it counts once, with its first operation (`call_first`), and
    no operation is compared with it. A synchronous copy's call (cudaMemcpy,
    not cudaMemcpyAsync) waits for the copy: its operation is not one the host
    could not issue fast enough, so it is not compared either (`compared`).

    Found without hashing the three call keys of every row: the operations of
    one call share its start, so only rows whose launch_start_ns repeats may
    share a call, and only those are grouped by CALL_KEY (two windows over
    every row took 0.5 s of 10^6 operations).
    """
    facts = launches.select(
        "op_id", "launch_ns", call_first=pl.lit(True), compared=~_sync_copies(launches)
    )
    starts = launches["launch_start_ns"]
    if starts.n_unique() == starts.len():  # no start repeats (cheaper than is_duplicated)
        return facts
    may_share = starts.is_duplicated()
    rows = may_share.arg_true()
    calls = launches[rows].select(
        first=pl.col("op_id") == pl.col("op_id").min().over(CALL_KEY),
        alone=pl.len().over(CALL_KEY) == 1,
    )
    return facts.with_columns(
        facts["call_first"].scatter(rows, calls["first"]),
        facts["compared"].scatter(rows, facts["compared"].gather(rows) & calls["alone"]),
    )


def _by_op_id(ops: pl.DataFrame, facts: pl.DataFrame) -> pl.DataFrame:
    """`ops` left-joined with `facts` (one row per op_id) on op_id, in `ops`' order: by
    gathers when op ids are small non-negative integers, each once in `facts` (as the
    attribution numbers operations), else by a join."""
    ids, wanted = facts["op_id"], ops["op_id"]
    low, high = opt_int(ids.min()), opt_int(ids.max())
    dense = low is not None and low >= 0 and high is not None and high < 2 * ids.len() + 1024
    slot = None
    if dense and high is not None and not ids.null_count():
        slot = pl.repeat(None, high + 1, dtype=pl.UInt32, eager=True)
        slot = slot.scatter(ids, pl.int_range(ids.len(), dtype=pl.UInt32, eager=True))
    if slot is None or slot.len() - slot.null_count() < ids.len():  # an op_id twice
        return ops.join(facts, on="op_id", how="left", maintain_order="left")
    inside = wanted.is_between(0, high).fill_null(False)
    row = slot.gather(pl.select(pl.when(inside).then(wanted)).to_series())
    return pl.concat([ops, facts.drop("op_id").select(pl.all().gather(row))], how="horizontal")


def _sync_copies(launches: pl.DataFrame) -> pl.Expr:
    """Per row of `launches`, whether its call is a synchronous copy (`is_sync_copy`),
    tested once per distinct call name (a handful among millions of rows)."""
    names = launches.select(pl.col("launch_api").unique().drop_nulls())
    sync = names.filter(is_sync_copy(pl.col("launch_api")))["launch_api"]
    return pl.col("launch_api").is_in(sync.implode()).fill_null(False)


def is_sync_copy(api: pl.Expr) -> pl.Expr:
    """Whether a launch call `api` is a synchronous copy or set (COPY_CALL, not Async):
    its call lasts until the copy is done (false for null)."""
    return (api.str.contains(COPY_CALL) & ~api.str.contains("(?i)async")).fill_null(False)


def idle_table(reached: pl.DataFrame, window: pl.DataFrame, waits: pl.DataFrame) -> pl.DataFrame:
    """IDLE rows but range_path: every gap of every stream and step, with its kind."""
    inner = g.kinded(g.interior_gaps(reached), g.reaching(reached, "device_id"), waits)
    rows = pl.concat(
        [inner.drop(*g.THREAD, "launch_start_ns"), g.edge_gaps(reached, window)], how="diagonal"
    )
    rows = rows.with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns"))
    return rows.sort([*g.GROUP, "start_ns"], nulls_last=True)


def with_paths(idle: pl.DataFrame, ops: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """IDLE rows: `idle` with the range path of each gap's next operation.

    The next operations are found by a filter on op_id, not a join: read from
    ops.parquet, only their rows' paths are read (a join read every path).
    """
    ids = idle["next_op_id"].drop_nulls().unique().implode()
    found = (
        ops.lazy()
        .filter(pl.col("op_id").is_in(ids))
        .select(next_op_id="op_id", range_path="range_path")
        .collect()
    )
    joined = idle.join(found, on="next_op_id", how="left", maintain_order="left")
    return joined.select(IDLE.names()).cast(IDLE)


def stream_idle(reached: pl.DataFrame, window: pl.DataFrame, idle: pl.DataFrame) -> pl.DataFrame:
    """STREAM_IDLE rows: busy (the union of the stream's operations) and idle per kind.

    Busy time is counted from the operations, not as the window less the
    gaps, so busy + idle = wall checks the two against each other.
    """
    covered = pl.col("reach") - pl.max_horizontal("start_ns", "prev_reach")
    busy = reached.group_by(g.GROUP).agg(
        ops=pl.len().cast(pl.Int64), busy_ns=covered.clip(lower_bound=0).sum()
    )
    dur = pl.col("dur_ns")
    gaps = idle.group_by(g.GROUP).agg(
        gaps=pl.len().cast(pl.Int64),
        idle_ns=dur.sum(),
        **{f"idle_{k}_ns": dur.filter(pl.col("kind") == k).sum() for k in WAIT_KINDS},
    )
    rows = busy.join(window, on=g.WINDOW, how="left", nulls_equal=True).join(
        gaps, on=g.GROUP, how="left", nulls_equal=True
    )
    counts = [c for c in STREAM_IDLE.names() if c.startswith("idle_") or c == "gaps"]
    out = rows.with_columns(
        pl.col(counts).fill_null(0), wall_ns=pl.col("wall_end_ns") - pl.col("wall_start_ns")
    ).sort(g.GROUP, nulls_last=True)
    return out.select(STREAM_IDLE.names()).cast(STREAM_IDLE)


def launch_cost(gpu: pl.DataFrame, launches: pl.DataFrame, idle: pl.DataFrame) -> pl.DataFrame:
    """LAUNCH_COST rows: per device, step, phase and module, the operations' time, their
    launch calls (`launches`: `rejoined_launches`; each call counted once, `call_facts`),
    and the idle time before them (the gaps they ended).

    Grouped and joined by codes of the phase and module names, and sorted by
    two packed ranks and the idle time, not by names: there is a group per
    step and module, about 0.6 per operation (a sort by five columns, two of
    them text, took half a second of 6·10^5 rows).
    """
    launched = gpu.select(
        *OWNER, "op_id", dur_ns=pl.col("end_ns") - pl.col("start_ns")
    ).with_columns(_CODED)
    # Per operation first, then plain sums: a filter inside each group's aggregation
    # cost twice as much.
    facts = _by_op_id(launched, call_facts(launches)).select(
        *OWNER,
        "dur_ns",
        _once=pl.when("call_first").then("launch_ns"),
        _shorter=pl.col("compared") & (pl.col("dur_ns") < pl.col("launch_ns")),
    )
    own = facts.group_by(OWNER).agg(
        ops=pl.len().cast(pl.Int64),
        busy_ns=pl.col("dur_ns").sum(),
        launches=pl.col("_once").count().cast(pl.Int64),
        launch_cpu_ns=pl.col("_once").sum(),
        shorter_than_launch=pl.col("_shorter").sum().cast(pl.Int64),
    )
    dur = pl.col("dur_ns")
    before = (
        idle.filter(pl.col("kind") != "after_last")
        .with_columns(_CODED)
        .group_by(OWNER)
        .agg(
            idle_before_ns=dur.sum(),
            **{f"idle_{k}_ns": dur.filter(pl.col("kind") == k).sum() for k in WAIT_INTERIOR},
        )
    )
    idle_columns = ["idle_before_ns", *(f"idle_{k}_ns" for k in WAIT_INTERIOR)]
    rows = own.join(before, on=OWNER, how="left", nulls_equal=True).with_columns(
        pl.col(idle_columns).fill_null(0)
    )
    whole = pl.col("busy_ns") + pl.col("idle_before_ns")
    share = pl.when(whole > 0).then(pl.col("idle_launch_ns") / whole).otherwise(0.0)
    # Sorted as by (device_id, step, -idle_before_ns, phase, module), nulls last.
    device_step = packed_ranks(_sort_rank(rows["device_id"]), _sort_rank(rows["step"]))
    names = packed_ranks(lexical_rank(rows["phase"]), lexical_rank(rows["module"]))
    keys = pl.DataFrame({"h": device_step, "i": rows["idle_before_ns"], "l": names})
    order = keys.select(pl.arg_sort_by(["h", "i", "l"], descending=[False, True, False]))
    out = rows.with_columns(launch_bound_share=share).select(LAUNCH_COST.names())
    return out[order.to_series()].cast(LAUNCH_COST)  # the keys sorted alone, rows gathered once


# launch_cost's names as codes (`launch_cost`).
_CODED = [pl.col("phase", "module").cast(pl.Categorical)]


def _sort_rank(values: pl.Series) -> pl.Series:
    """Integers from 1 that sort as `values` do, for `packed_ranks`: the values plus one
    when they lie in 0 .. 2^31 - 2 (device ids and step numbers: no sort), else their
    dense ranks."""
    low, high = opt_int(values.min()), opt_int(values.max())
    if low is None or high is None or low < 0 or high >= (1 << 31) - 1:
        return values.rank("dense")
    return values.cast(pl.Int64) + 1


def packed_ranks(high: pl.Series, low: pl.Series) -> pl.Series:
    """One Int64 per row that sorts as (`high`, `low`) do, nulls after every value.

    Both are integers from 1, below 2^31 (dense ranks, or `_sort_rank`'s values).
    """

    def last_null(rank: pl.Series) -> pl.Series:
        return rank.cast(pl.Int64).fill_null(1 + (opt_int(rank.max()) or 0))

    return (last_null(high) * (1 << 32) + last_null(low)).alias("packed")
