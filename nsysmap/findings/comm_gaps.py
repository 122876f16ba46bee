"""Idle time of the busiest stream under exposed communication: one nanosecond, one claim.

While a communication kernel runs exposed (no compute of its process beside it:
nsysmap.summaries.comm_overlap), the busiest stream sits idle in one of its gaps,
and the gap's kind (sync, launch, latency, ...) puts it in an idle pool
(nsysmap.findings.inputs). host_sync, launch_bound and the other rules of idle
time claim the gap; exposed_communication claims the communication: the same
wall time, twice::

    busiest stream  |== k1 ==|        sync gap        |== k2 ==|
    NCCL stream           |===== all_to_all, exposed =====|
    under both               ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^

`idle_claims` claims the part of an idle pool that lies under each exposed
communication row (device, phase, collective) at that row's own key
(`comm_exposed`, as exposed_communication and straggler claim it) and only the
rest at the idle pool's key, each in proportion to what the finding wants of the
pool; the ranking (nsysmap.findings.rank) then gives that time once, to the
finding served first, and the other names it in `overlaps`.

`exposed_kernels` is the communication kernels the findings count (shared with
nsysmap.findings.comm).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from nsysmap.findings.finding import Claim
from nsysmap.findings.inputs import OWNER, STEPS, Inputs
from nsysmap.findings.threshold import LAUNCH_GAP
from nsysmap.intervals.hiding import hidden_ns
from nsysmap.report.collectives import collective
from nsysmap.summaries.comm_overlap import COMPUTE, hidden_communication, same_keys

ONE_OFF = "broadcast"  # without steps: taken as initialisation, left out
COMM = ["device_id", "phase", "collective"]  # an exposed communication row
PART = ["comm_phase", "collective"]  # ... as the parts of an idle pool name it
INTERVAL = ["stream_id", "start_ns", "end_ns"]
# The stream of a gap's exposed stretches once merged (`_exposed_under`): none that runs work.
MERGED_STREAM = -1


def _once(x: Inputs, what: str, make: Callable[[Inputs], Any]) -> Any:
    """`make(x)`, worked out once per input (`Inputs.memo`: rules ask for it many times)."""
    if what not in x.memo:
        x.memo[what] = make(x)
    return x.memo[what]


def exposed_kernels(x: Inputs) -> pl.DataFrame:
    """The measured communication kernels with their hidden and exposed time and their
    collective (empty when there are none); without steps, broadcasts are left out."""
    return _once(x, "kernels", _exposed_kernels)


def _exposed_kernels(x: Inputs) -> pl.DataFrame:
    if not x.has("communication"):
        return pl.DataFrame()
    comm = hidden_communication(x.measured(), keep=("phase", "name", "range_path"))
    if comm.is_empty():
        return pl.DataFrame()
    named = comm.with_columns(collective=collective(pl.col("name"), pl.col("range_path")))
    return named if x.basis == STEPS else named.filter(pl.col("collective") != ONE_OFF)


def idle_claims(
    x: Inputs, frame: pl.DataFrame, pool: str, wanted: str, capacity: str
) -> tuple[Claim, ...]:
    """One row of `frame` (OWNER keys, `wanted` and `capacity` ns of the idle pool `pool`)
    claimed as `claims_of` would, less the pool's time under exposed communication,
    which is claimed at the communication's keys (see the module)."""
    parts = shared(x).filter(pl.col("pool") == pool)
    comm = _comm_capacity(x)
    claims: list[Claim] = []
    for row in frame.iter_rows(named=True):
        have = max(int(row[capacity] or 0), 0)
        want = min(max(int(row[wanted] or 0), 0), have)
        mine = _parts_of(parts, row, have)
        given = 0
        for part in mine.iter_rows(named=True):
            device, phase, what = row["device_id"], part["comm_phase"], part["collective"]
            share = want * part["ns"] // have if have else 0
            if share:  # keyed as exposed_communication keys it (module: the collective)
                key = ("comm_exposed", x.rank, device, phase, what, what)
                claims.append(Claim(key, share, comm.get((device, phase, what), part["ns"])))
                given += share
        rest_have = have - int(mine["ns"].sum())
        rest_want = min(want - given, rest_have)
        if rest_want > 0:
            claims.append(Claim((pool, x.rank, *(row[k] for k in OWNER)), rest_want, rest_have))
    return tuple(claims)


def _parts_of(parts: pl.DataFrame, row: dict, have: int) -> pl.DataFrame:
    """The parts of one pool row (its OWNER) under exposed communication, at most `have`."""
    mine = parts.filter(*(pl.col(k).eq_missing(row[k]) for k in OWNER))
    total = int(mine["ns"].sum())
    if total <= have:
        return mine
    return mine.with_columns(ns=scaled(pl.col("ns"), have, total))  # never more than the pool


def _comm_capacity(x: Inputs) -> dict[tuple, int]:
    """(device, phase, collective) -> the exposed time there: comm_exposed's capacity."""
    return _once(x, "capacity", _capacity)


def _capacity(x: Inputs) -> dict[tuple, int]:
    kernels = exposed_kernels(x)
    if kernels.is_empty():
        return {}
    rows = kernels.group_by(COMM).agg(pl.col("exposed_ns").sum())
    return {(r[0], r[1], r[2]): int(r[3]) for r in rows.iter_rows()}


def shared(x: Inputs) -> pl.DataFrame:
    """Per OWNER, idle pool and exposed communication row (`comm_phase`, `collective`):
    `ns` of the busiest stream's gaps there under that communication, exposed."""
    return _once(x, "shared", _shared)


def _shared(x: Inputs) -> pl.DataFrame:
    owner = {k: x.gaps.schema.get(k, pl.Int64) for k in OWNER}
    schema = pl.Schema(
        {**owner, "pool": pl.String, "comm_phase": pl.String, "collective": pl.String}
        | {"ns": pl.Int64}
    )
    kernels = exposed_kernels(x)
    if x.gaps.is_empty() or kernels.is_empty():
        return pl.DataFrame(schema=schema)
    kernels = kernels.filter(pl.col("exposed_ns") > 0)
    gaps = x.gaps.with_row_index("gap").with_columns(pool=_pool())
    pieces = _pieces(gaps, kernels, same_keys(kernels))
    if pieces.is_empty():
        return pl.DataFrame(schema=schema)
    compute = x.measured().filter(COMPUTE).select(*same_keys(kernels), *INTERVAL).collect()
    keys = same_keys(kernels)
    hidden = hidden_ns(pieces.select(*keys, *INTERVAL), compute, by=keys)
    pieces = pieces.with_columns(ns=pl.col("end_ns") - pl.col("start_ns") - hidden)
    # Exposed kernels over one gap on several streams: together, no more than the gap's
    # time under at least one of them, exposed (`_exposed_under`).
    pieces = pieces.join(_exposed_under(pieces, compute, keys), on="gap", how="left")
    cap = pl.min_horizontal("cap_ns", "dur_ns")  # the gap's own length at most
    over = pl.col("ns").sum().over("gap")
    cut = pl.when(over > cap).then(scaled(pl.col("ns"), cap, over))
    pieces = pieces.with_columns(ns=cut.otherwise(pl.col("ns"))).drop("cap_ns")
    summed = pieces.group_by(*OWNER, "pool", *PART).agg(pl.col("ns").sum())
    return summed.filter(pl.col("ns") > 0).cast(schema)


def _exposed_under(
    pieces: pl.DataFrame, compute: pl.DataFrame, keys: Sequence[str]
) -> pl.DataFrame:
    """Per gap, `cap_ns`: its time under at least one exposed kernel, less the compute
    beside it. The pieces of one gap are merged into their union first, so that two
    kernels on two streams over one stretch of it count that stretch once::

        gap (busiest stream)   |---------------- 4 ms ----------------|
        stream 20                  |====== all-reduce, 3 ms ======|
        stream 21                  |====== all-gather, 3 ms ======|
        compute, other stream      |-- 1.5 ms --|
        cap_ns                                  ^^^ 1.5 ms ^^^^^^^^^

    (each kernel alone is exposed for 1.5 ms; together, 1.5 ms, not 3 and not the
    gap's 4). A merged stretch is hidden by compute on any stream
    (MERGED_STREAM): a stream runs no compute during its own communication
    kernel, so its compute beside the stretch runs beside another stream's.
    """
    by = ["gap", *keys]
    ordered = pieces.select(*by, *INTERVAL).sort(*by, "start_ns")
    reach = pl.col("end_ns").cum_max().shift(1).over(by)  # furthest end before, same gap
    merged = (
        ordered.with_columns(stretch=(reach.is_null() | (pl.col("start_ns") > reach)).cum_sum())
        .group_by(*by, "stretch")
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .with_columns(stream_id=pl.lit(MERGED_STREAM, pl.Int64))
    )
    hidden = hidden_ns(merged.select(*keys, *INTERVAL), compute, by=keys)
    exposed = merged.select("gap", ns=pl.col("end_ns") - pl.col("start_ns") - hidden)
    return exposed.group_by("gap").agg(cap_ns=pl.col("ns").sum())


def scaled(ns: pl.Expr, part: pl.Expr | int, whole: pl.Expr | int) -> pl.Expr:
    """`ns` * `part` // `whole` (Int64), through Float64: the product of two long
    stretches overflows Int64 (a 4 s gap times 4 s is above 2^63 ns^2)."""
    return (ns.cast(pl.Float64) * part / whole).floor().cast(pl.Int64)


def _pool(launch_gap: float = LAUNCH_GAP.value) -> pl.Expr:
    """A gap's idle pool: idle_<kind>, launch gaps longer than `launch_gap` apart."""
    kind = pl.col("kind").cast(pl.String)
    long = (kind == "launch") & (pl.col("dur_ns") > launch_gap)
    return pl.when(long).then(pl.lit("idle_long_launch")).otherwise("idle_" + kind)


def _pieces(gaps: pl.DataFrame, kernels: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """Each (gap, exposed kernel) pair that overlaps, on one device: the overlap's interval
    on the kernel's stream, with the gap's OWNER, pool and length and the kernel's `keys`,
    phase (`comm_phase`) and collective. An inequality join per device."""
    wanted = kernels.select(
        *keys,
        k_stream="stream_id",
        k_start="start_ns",
        k_end="end_ns",
        comm_phase="phase",
        collective="collective",
    )
    gap_columns = ["gap", *OWNER, "pool", "dur_ns", "start_ns", "end_ns"]
    out = []
    for device in wanted["device_id"].unique().drop_nulls():
        here = gaps.filter(pl.col("device_id") == device).select(gap_columns)
        theirs = wanted.filter(pl.col("device_id") == device).drop("device_id")
        if here.is_empty() or theirs.is_empty():
            continue
        joined = here.join_where(
            theirs, pl.col("start_ns") < pl.col("k_end"), pl.col("k_start") < pl.col("end_ns")
        )
        out.append(
            joined.select(
                "gap",
                *OWNER,
                "pool",
                "dur_ns",
                *(k for k in keys if k != "device_id"),
                "comm_phase",
                "collective",
                stream_id="k_stream",
                start_ns=pl.max_horizontal("start_ns", "k_start"),
                end_ns=pl.min_horizontal("end_ns", "k_end"),
            )
        )
    return pl.concat(out) if out else pl.DataFrame()
