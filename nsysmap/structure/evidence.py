"""The passes of a profile, from each kind of evidence in turn (pure).

Ranges win where they name things, PyTorch's records and the kernel sequence
fill the rest:

1. *labels with steps*: per step, the operations of each direction's phase
   (step and phase from ranges or records, as ops.parquet has them);
2. *phase ranges* (no steps): each instance of a range whose name gives a
   direction and that lies in no range giving the same one (`profile >
   forward pass`); one holding several passes of the kernel sequence is
   that many passes (`--phase 'forward=^timed_iterations$'` around three);
3. *records*: runs of operations whose phase only PyTorch's records give;
4. *the kernel sequence* (nsysmap.infer): each inferred pass's forward,
   backward and optimizer part that overlaps no pass found above, kept when
   its confidence is at least MIN_INFERRED; one whose every pass holds the
   same ranges as often (`attention` 12 times) is said so (`repeated_ranges`).

Every function takes `base` (nsysmap.structure.model: one row per operation
with device `dev`, `pid`, launch time `at`, labels and inferred labels) and
returns pass candidates: dev, pid, direction, start_ns, end_ns, step, phase,
name, evidence, confidence, origin (what steps are made of: the step label, a
range id, an inferred pass).
"""

from __future__ import annotations

import polars as pl

from nsysmap.structure.overlaps import merged, overlapping
from nsysmap.structure.ranges import containing
from nsysmap.structure.table import DIRECTIONS

MIN_INFERRED = 0.5  # inferred passes less confident than this are no passes
# Module calls stand for passes only when they hold at least this share of the time.
MODULES_COVER = 0.5
CANDIDATE = pl.Schema(
    {
        "dev": pl.Int64,
        "pid": pl.Int64,
        "direction": pl.String,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "step": pl.Int64,
        "phase": pl.String,
        "name": pl.String,
        "evidence": pl.String,
        "confidence": pl.Float64,
        "origin": pl.String,  # "step:<label>", "range:<id>" or "inferred:<pass>"
        "warm": pl.Boolean,  # warm-up work (ops.parquet's `warmup`) for the most part
    }
)
# Of a candidate's operations: its span, and whether it is warm-up work (at least
# WARM_SHARE of its time is: ops.parquet's `warmup`).
WARM_SHARE = 0.5
_WARM = (
    pl.col("dur_ns").filter(pl.col("warmup").fill_null(False)).sum()
    >= WARM_SHARE * pl.col("dur_ns").sum()
)
_SPAN = (
    pl.col("at").min().alias("start_ns"),
    pl.col("at").max().alias("end_ns"),
    _WARM.alias("warm"),
)


def _source(column: str) -> pl.Expr:
    """ "range", "records" or both, from ops.parquet's `step_source` / `phase_source`."""
    return pl.col(column).cast(pl.String).drop_nulls().unique().sort().str.join(", ")


def _conform(frame: pl.DataFrame) -> pl.DataFrame:
    missing = [pl.lit(None, t).alias(c) for c, t in CANDIDATE.items() if c not in frame.columns]
    return frame.with_columns(missing).select(CANDIDATE.names()).cast(CANDIDATE)


def labelled_steps(base: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(passes, steps) of the processes with step labels: per step, one pass per direction."""
    read = ("dev", "pid", "step", "phase", "at", "dur_ns", "warmup", "step_source", "phase_source")
    stepped = base.select(read)  # these columns alone, not copied
    if stepped["step"].null_count():  # copied only where some operation has no step
        stepped = stepped.filter(pl.col("step").is_not_null())
    passes = (
        # Grouped by every phase, then the directions' groups kept: no copy of their rows.
        stepped.group_by("dev", "pid", "step", "phase")
        .agg(*_SPAN, evidence=_source("phase_source"))
        .filter(pl.col("phase").is_in(DIRECTIONS))
        .with_columns(
            direction=pl.col("phase"),
            confidence=pl.lit(1.0),
            origin=pl.format("step:{}", "step"),
        )
    )
    steps = (
        stepped.group_by("dev", "pid", "step")
        .agg(*_SPAN, evidence=_source("step_source"))
        .with_columns(confidence=pl.lit(1.0), origin=pl.format("step:{}", "step"))
    )
    return _conform(passes), _conform(steps)


def phase_ranges(base: pl.DataFrame, ranges: pl.DataFrame, inferred: pl.DataFrame) -> pl.DataFrame:
    """Passes of the outermost ranges that give a direction, in processes without steps;
    one holding several `inferred` passes of its direction is split into them. In a
    process where no operation has a phase, the outermost module calls (`nn.Module: ...`,
    FSDP's) instead. Each process is judged on its own operations (a process read
    alone gives the same passes)."""
    unphased = base["phase"].is_null()
    if unphased.all():
        return _module_calls(base, ranges, inferred)
    every = pl.col("phase").is_null().all().over("pid")  # a process without phases
    bare = base.select(every).to_series() if unphased.any() else None
    if bare is None or not bare.any():
        return _phase_passes(base, ranges, inferred)
    return pl.concat(
        [
            _phase_passes(base.filter(~bare), ranges, inferred),
            _module_calls(base.filter(bare), ranges, inferred),
        ]
    )


def _phase_passes(base: pl.DataFrame, ranges: pl.DataFrame, inferred: pl.DataFrame) -> pl.DataFrame:
    """Passes of the outermost ranges that give a direction (see `phase_ranges`)."""
    outer = ranges.filter(pl.col("outermost") & pl.col("phase").is_in(DIRECTIONS))
    if outer.is_empty():
        return _conform(pl.DataFrame())
    ops = base.filter(pl.col("phase").is_in(DIRECTIONS)).sort("at")
    held = ops.join_asof(
        outer.select(
            "pid", "range_id", "name", r_start="start_ns", r_end="end_ns", r_phase="phase"
        ).sort("r_start"),
        left_on="at",
        right_on="r_start",
        by="pid",
        strategy="backward",
        check_sortedness=False,
    ).filter((pl.col("at") <= pl.col("r_end")) & (pl.col("phase") == pl.col("r_phase")))
    passes = held.group_by("dev", "pid", "range_id", "name", "phase").agg(*_SPAN)
    passes = passes.with_columns(
        direction=pl.col("phase"),
        evidence=pl.lit("range"),
        confidence=pl.lit(1.0),
        origin=pl.format("range:{}", "range_id"),
    )
    return _split(passes, inferred)


def _module_calls(base: pl.DataFrame, ranges: pl.DataFrame, inferred: pl.DataFrame) -> pl.DataFrame:
    """Passes of the outermost module calls of each direction (processes without phases),
    in each process whose calls hold at least MODULES_COVER of its operations' time."""
    calls = ranges.filter(pl.col("outer_call") & pl.col("call").is_in(DIRECTIONS))
    if calls.is_empty():
        return _conform(pl.DataFrame())
    spans = calls.select(
        "pid", "range_id", "name", r_start="start_ns", r_end="end_ns", direction="call"
    ).sort("r_start")
    held = (
        base.sort("at")
        .join_asof(spans, left_on="at", right_on="r_start", by="pid", check_sortedness=False)
        .filter(pl.col("at") <= pl.col("r_end"))
    )
    # A process where a few modules are recorded has no passes of the model from them.
    covered = held.group_by("pid").agg(pl.col("dur_ns").sum().alias("held"))
    total = base.group_by("pid").agg(pl.col("dur_ns").sum().alias("all"))
    enough = covered.join(total, on="pid", nulls_equal=True).filter(
        pl.col("held") >= MODULES_COVER * pl.col("all")
    )
    if enough.is_empty():
        return _conform(pl.DataFrame())
    if enough.height < total.height:
        held = held.join(enough.select("pid"), on="pid", how="semi", nulls_equal=True)
    passes = held.group_by("dev", "pid", "range_id", "name", "direction").agg(*_SPAN)
    passes = passes.with_columns(
        evidence=pl.lit("module_calls"),
        confidence=pl.lit(1.0),
        origin=pl.format("range:{}", "range_id"),
    )
    return _split(passes, inferred)


def _split(passes: pl.DataFrame, inferred: pl.DataFrame) -> pl.DataFrame:
    """Range passes holding two inferred passes or more of their direction: those instead."""
    if inferred.is_empty():
        return _conform(passes)
    inside = passes.join(
        inferred.select(
            "dev", "pid", "direction", i_start="start_ns", i_end="end_ns", i_conf="confidence"
        ),
        on=["dev", "pid", "direction"],
    ).filter((pl.col("i_start") >= pl.col("start_ns")) & (pl.col("i_end") <= pl.col("end_ns")))
    counts = inside.group_by("origin").len()
    several = counts.filter(pl.col("len") > 1)["origin"]
    split = inside.filter(pl.col("origin").is_in(several.implode())).select(
        pl.exclude("start_ns", "end_ns", "confidence", "evidence", "i_conf"),
        start_ns="i_start",
        end_ns="i_end",
        confidence="i_conf",
        evidence=pl.lit("range, kernel_sequence"),
    )
    kept = passes.filter(~pl.col("origin").is_in(several.implode()))
    return pl.concat([_conform(kept), _conform(split)])


def records(base: pl.DataFrame, found: pl.DataFrame) -> pl.DataFrame:
    """Runs of operations with a direction's phase that no pass of `found` holds."""
    ops = base.filter(pl.col("phase").is_in(DIRECTIONS)).sort("dev", "pid", "at")
    ops = ops.filter(~_covered(ops, found))
    if ops.is_empty():
        return _conform(pl.DataFrame())
    run = (pl.col("phase") != pl.col("phase").shift(1)).fill_null(True).cum_sum().over("dev", "pid")
    runs = (
        ops.with_columns(run=run)
        .group_by("dev", "pid", "run", "phase")
        .agg(*_SPAN, evidence=_source("phase_source"))
    )
    return merged(
        _conform(
            runs.with_columns(
                direction=pl.col("phase"),
                confidence=pl.lit(0.9),
                origin=pl.format("records:{}", "run"),
            )
        )
    )


def _covered(ops: pl.DataFrame, found: pl.DataFrame) -> pl.Series:
    """Which of `ops` (sorted by at) lie in the span of a pass of `found`."""
    if found.is_empty():
        return pl.repeat(False, ops.height, eager=True)
    spans = found.select("dev", "pid", "start_ns", "end_ns").sort("start_ns")
    joined = ops.select("dev", "pid", "at").join_asof(
        spans, left_on="at", right_on="start_ns", by=["dev", "pid"], check_sortedness=False
    )
    return (joined["at"] <= joined["end_ns"]).fill_null(False)


def inferred_passes(base: pl.DataFrame) -> pl.DataFrame:
    """Each inferred pass's forward, backward and optimizer part (every one, unfiltered)."""
    if "inferred_step" not in base.columns:
        return _conform(pl.DataFrame())
    weight = pl.col("dur_ns").clip(lower_bound=1)
    parts = (
        # Grouped by every inferred phase, then the directions' groups kept: no copy of
        # the operations' rows (at 10^7 operations, 1.3 GB less).
        base.group_by("dev", "pid", "inferred_step", "inferred_phase")
        .agg(
            *_SPAN,
            confidence=(pl.col("inferred_confidence").fill_null(0) * weight).sum() / weight.sum(),
        )
        .filter(pl.col("inferred_phase").is_in(DIRECTIONS))
    )
    return merged(
        _conform(
            parts.with_columns(
                direction=pl.col("inferred_phase"),
                evidence=pl.lit("kernel_sequence"),
                origin=pl.format("inferred:{}", "inferred_step"),
            )
        )
    )


def fill(inferred: pl.DataFrame, found: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """The inferred passes that overlap no pass of `found`, at least MIN_INFERRED sure,
    with the ranges that repeat as often in each of them."""
    keep = inferred.filter(pl.col("confidence") >= MIN_INFERRED)
    keep = keep.filter(~overlapping(keep, found, ["dev", "pid"]))
    return _repeated(keep, ranges)


def _repeated(passes: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """Forward passes in which some range (by key) repeats, as often in each: named by it,
    evidence `repeated_ranges`, confidence at least 0.95."""
    forward = passes.filter(pl.col("direction") == "forward").with_row_index("_i")
    if forward.height < 2 or ranges.is_empty():
        return passes
    spans = ranges.select("pid", "key", "start_ns", "end_ns").sort("start_ns")
    placed = spans.join_asof(
        forward.select("pid", "_i", p_start="start_ns", p_end="end_ns").sort("p_start"),
        left_on="start_ns",
        right_on="p_start",
        by="pid",
        check_sortedness=False,
    ).filter(pl.col("end_ns") <= pl.col("p_end"))
    counts = placed.group_by("key", "_i").len()
    steady = counts.group_by("key").agg(
        pl.col("_i").n_unique().alias("passes"),
        pl.col("len").min().alias("low"),
        pl.col("len").max().alias("high"),
    )
    steady = steady.filter(
        (pl.col("passes") == forward.height) & (pl.col("low") == pl.col("high"))
    ).sort("low", "key", descending=[True, False])
    if steady.is_empty():
        return passes
    key = str(steady["key"][0])
    return pl.concat(
        [
            passes.filter(pl.col("direction") != "forward"),
            forward.drop("_i").with_columns(
                name=pl.lit(key),
                evidence=pl.lit("kernel_sequence, repeated_ranges"),
                confidence=pl.max_horizontal("confidence", pl.lit(0.95)),
            ),
        ]
    )


def range_steps(passes: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """Steps of ranges that hold one forward pass and a backward pass (the innermost such
    range of each forward pass)."""
    spans = passes.with_row_index("span").with_columns(pl.col("span").cast(pl.Int64))
    held = containing(spans, ranges.filter(pl.col("phase").is_null() & pl.col("call").is_null()))
    if held.is_empty():
        return _conform(pl.DataFrame())
    held = held.join(spans.select("span", "dev", "direction"), on="span")
    per = held.group_by("dev", "range_id", "name", "r_start_ns", "r_end_ns").agg(
        forward=(pl.col("direction") == "forward").sum(),
        backward=(pl.col("direction") == "backward").sum(),
        span=pl.col("span").filter(pl.col("direction") == "forward").first(),
        depth=pl.col("depth").first(),
    )
    steps = per.filter((pl.col("forward") == 1) & (pl.col("backward") >= 1))
    # innermost first; of tied ranges (two threads, one start and depth) the first by name
    order = ["depth", "name", "r_start_ns", "r_end_ns"]
    steps = steps.sort(order, descending=[True, False, False, False])
    steps = steps.unique("span", keep="first", maintain_order=True)
    pid = spans.select("span", "pid")
    return _conform(
        steps.join(pid, on="span").select(
            "dev",
            "pid",
            "name",
            start_ns="r_start_ns",
            end_ns="r_end_ns",
            evidence=pl.lit("range"),
            confidence=pl.lit(1.0),
            origin=pl.format("range:{}", "range_id"),
        )
    )


def inferred_steps(passes: pl.DataFrame) -> pl.DataFrame:
    """Steps of the inferred passes with a forward and a backward part kept as passes."""
    inferred = passes.filter(pl.col("origin").str.starts_with("inferred:"))
    steps = inferred.group_by("dev", "pid", "origin").agg(
        pl.col("start_ns").min(),
        pl.col("end_ns").max(),
        pl.col("confidence").min(),
        both=pl.col("direction").is_in(["forward"]).any()
        & pl.col("direction").is_in(["backward"]).any(),
    )
    return _conform(steps.filter("both").with_columns(evidence=pl.lit("kernel_sequence")))
