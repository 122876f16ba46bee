"""Steps and phases from what PyTorch records anyway, where no range names them.

The ranges' step and phase always win: an operation gets a step or phase from
its records only when its ranges give none (`step_source` / `phase_source`
"range" or "records" in ops.parquet). From the evidence of
`nsysmap.attribution.record_evidence`, per process in launch order:

* **steps**, only in a process where no operation has a range-given step: a
  step ends with its optimizer work, the last optimizer operation (an
  `Optimizer.step#...` range's work, or an optimizer kernel) between one
  backward pass and the next. Steps are numbered from 0; a process without
  both backward and optimizer work gets none. What follows the last
  boundary (a metric update, an evaluation forward) stays in the last step
  unless a backward pass begins there, which opens a step of its own.

      ops   F F F B B B B O O F F F B B B O O M M     F F B B
      step  0 0 0 0 0 0 0 0 0|1 1 1 1 1 1 1 1 1 1  or  2 2 2 2

* **phases**, in each step (the whole process where there are no steps):
  `backward` for backward work; `forward` for forward module calls and for
  what runs before the step's first backward operation except optimizer
  work; `optimizer` for what runs after the step's last backward operation
  up to its last optimizer kernel. The last two go by place in the step and
  are not used in a step where ranges name that phase: what a user's
  `forward` range leaves out (a copy of the batch) is not forward work. A
  step without backward work is no training step and gets no phase from its
  records: a forward-only profile gets no backward, no optimizer, no steps,
  and no forward either (its module calls already say `direction` forward,
  which is what summaries of such profiles read).

GPU work without a launch call, in a process whose other work has launch
calls, has no place in launch order: most often the GPU ran it while the
capture began, launched before it (a deep queue left from the step before).
It is no optimizer boundary and gets no step or phase by place; it takes the
step and phase of the placed work before and after it on its stream where
both have the same ones (a stream runs its work in launch order), else none.
"""

from __future__ import annotations

import polars as pl

from nsysmap.attribution.record_evidence import EVIDENCE
from nsysmap.attribution.record_repeat import from_repeated_step
from nsysmap.core.schemas import LabelSource as Source
from nsysmap.core.schemas import declare

# What `record_labels` returns, one row per operation in operation order.
RECORD_LABELS = declare(
    {"step": pl.Int64, "step_source": Source, "phase": pl.String, "phase_source": Source}
)
_OPTIMIZER_WORK = ("optimizer", "zero_grad")  # range phases that are not forward work

_t, _backward = pl.col("t"), pl.col("backward")
_forward, _optimizer = pl.col("forward"), pl.col("optimizer")
_range_phase, _placed = pl.col("range_phase"), pl.col("launched")
_STREAM = ["device_id", "stream_id"]


def record_labels(evidence: pl.DataFrame) -> pl.DataFrame:
    """RECORD_LABELS for the ops of `evidence` (EVIDENCE columns), in the same order."""
    frame = evidence.select(EVIDENCE.names())
    if _nothing_to_add(frame):
        frame = frame.with_columns(record_step=pl.lit(None, pl.Int64), record_phase=pl.lit(None))
    else:
        order = frame.select(pl.arg_sort_by("pid", "t", maintain_order=True)).to_series()
        steps = pl.repeat(None, frame.height, dtype=pl.Int64, eager=True).alias("record_step")
        frame = frame.with_columns(steps.scatter(order, _record_steps(frame[order])))
        frame = frame.with_columns(step=pl.coalesce("range_step", "record_step"))
        frame = _with_record_phases(frame, ["pid", "step"])
        frame = from_repeated_step(_from_stream_neighbours(frame))
    out = frame.select(
        pl.coalesce("range_step", "record_step").alias("step"),
        _source("range_step", "record_step").alias("step_source"),
        pl.coalesce("range_phase", "record_phase").alias("phase"),
        _source("range_phase", "record_phase").alias("phase_source"),
    )
    return out.cast(RECORD_LABELS)


def _nothing_to_add(frame: pl.DataFrame) -> bool:
    """True when records can give no op a step or phase: every op has both from its
    ranges, or nothing is backward work."""
    named = frame.select(pl.col("range_step", "range_phase").is_not_null().all()).row(0)
    return all(named) or not frame["backward"].any()


def _source(given: str, recorded: str) -> pl.Expr:
    return (
        pl.when(pl.col(given).is_not_null())
        .then(pl.lit("range"))
        .when(pl.col(recorded).is_not_null())
        .then(pl.lit("records"))
        .cast(Source)
    )


def _record_steps(frame: pl.DataFrame) -> pl.Series:
    """Per op of `frame` (sorted by pid, t), the step its optimizer boundaries give;
    null where the process has range-given steps or no boundary."""
    passes = _backward.cast(pl.Int64).cum_sum().over("pid")  # backward ops so far
    optimizer_work = _optimizer | (_range_phase == "optimizer").fill_null(False)
    work = optimizer_work & (passes > 0) & _placed
    rows = frame.select(pl.int_range(pl.len(), dtype=pl.UInt32).filter(work))
    # the last optimizer op of each stretch between backward ops
    key = frame.select("pid", passes.alias("passes"))[rows.to_series()]
    last = key.select(pl.any_horizontal(pl.all().ne_missing(pl.all().shift(-1))))
    end = pl.repeat(False, frame.height, eager=True)
    end = end.scatter(rows.filter(last.to_series()).to_series(), True).cast(pl.Int64)
    step = pl.col("end").cum_sum().over("pid") - pl.col("end")
    # after the last boundary: the last step's tail unless a backward pass begins there
    tail = (step == pl.col("end").sum().over("pid")) & (step > 0)
    tail_backward = (tail & _backward).any().over("pid")
    step = pl.when(tail & ~tail_backward).then(step - 1).otherwise(step)
    steps = frame.with_columns(end=end).select(
        pl.when(
            pl.col("range_step").is_null().all().over("pid")
            & (pl.col("end").max().over("pid") > 0)
            & _placed
        ).then(step)
    )
    return steps.to_series().alias("record_step")


def _with_record_phases(frame: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    """`frame` with `record_phase`: the phase its records give within its `group`
    (a step of a process). Group bounds come from two aggregations joined back."""
    bounds = frame.group_by(group).agg(
        first_backward=pl.when(_backward).then(_t).min(),
        last_backward=pl.when(_backward).then(_t).max(),
        named_forward=_named("forward"),
        named_optimizer=_named("optimizer"),
    )
    frame = _joined(frame, bounds, group)
    after = _t > pl.col("last_backward")
    last = frame.filter(_optimizer & after & _placed).group_by(group).agg(last_optimizer=_t.max())
    frame = _joined(frame, last, group)
    optimizer_work = _optimizer | _range_phase.is_in(_OPTIMIZER_WORK).fill_null(False)
    phase = (
        pl.when(pl.col("first_backward").is_null() | ~_placed)  # no training step, or no place
        .then(pl.lit(None, pl.String))
        .when(_backward)
        .then(pl.lit("backward"))
        .when(_forward)
        .then(pl.lit("forward"))
        .when(after & (_t <= pl.col("last_optimizer")) & ~pl.col("named_optimizer"))
        .then(pl.lit("optimizer"))
        .when((_t < pl.col("first_backward")) & ~optimizer_work & ~pl.col("named_forward"))
        .then(pl.lit("forward"))
    )
    return frame.with_columns(record_phase=phase)


def _from_stream_neighbours(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with the record step and phase of each op that has no place in launch
    order (no launch call in a process with launches) taken from the placed ops
    before and after it in its stream, where both have the same one: a stream runs
    its work in launch order."""
    unplaced = frame.select(~_placed).to_series()
    if not unplaced.any():
        return frame
    order = frame.select(pl.arg_sort_by(*_STREAM, "start_ns", maintain_order=True)).to_series()
    stream = frame[order].select(
        *_STREAM,
        pl.when(_placed).then(pl.int_range(pl.len(), dtype=pl.Int64)).alias("at"),
        pl.coalesce("range_step", "record_step").alias("step"),
        pl.coalesce("range_phase", "record_phase").alias("phase"),
        (~_placed).alias("unplaced"),
    )
    around = stream.select(
        before=pl.col("at").forward_fill().over(_STREAM),
        after=pl.col("at").backward_fill().over(_STREAM),
    )
    labels = stream.select("step", "phase")
    before, after = labels[around["before"]], labels[around["after"]]
    same_step = before["step"].eq_missing(after["step"]) & stream["unplaced"]
    same_step = same_step & around["before"].is_not_null() & around["after"].is_not_null()
    step = pl.select(pl.when(same_step).then(before["step"])).to_series()
    same_phase = same_step & (before["phase"] == after["phase"]).fill_null(False)
    phase = pl.select(pl.when(same_phase).then(before["phase"])).to_series()
    nothing = pl.repeat(None, frame.height, dtype=pl.Int64, eager=True)
    return frame.with_columns(
        pl.coalesce("record_step", nothing.scatter(order, step)).alias("record_step"),
        pl.coalesce("record_phase", nothing.cast(pl.String).scatter(order, phase)).alias(
            "record_phase"
        ),
    )


def _joined(frame: pl.DataFrame, per_group: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    return frame.join(per_group, on=group, how="left", nulls_equal=True, maintain_order="left")


def _named(phase: str) -> pl.Expr:
    """True in a group where ranges name `phase`: its place in the step then says
    nothing there (what a user's forward range leaves out is not forward work)."""
    return (_range_phase == phase).fill_null(False).any()
