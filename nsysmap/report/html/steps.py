"""Charts of time by phase per step, and of its spread from step to step (pure).

Both draw the measured steps that the page's header counts (the report's step
scope: warm-up steps left out), wherever the structure found them: step labels,
a range holding a forward and a backward pass, or the kernel sequence; the
caption says which. Without measured steps, one bar per device sums every
operation of the run per phase.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from instrument.phase_vocabulary import PHASES
from nsysmap.report import scope_tables as rt
from nsysmap.report.format import cap
from nsysmap.report.html.chart import (
    PHASE_COLOURS,
    SERIES,
    Chart,
    bar,
    box,
    category_axis,
    chart,
    first_rows,
    ms,
    stacked,
    table,
    time_axis,
)
from nsysmap.report.html.scope_names import scope_name
from nsysmap.structure.words import code

if TYPE_CHECKING:
    from nsysmap.report.answers import Findings

NO_PHASE = "(none)"
TOTAL = "step total"  # the spread chart's box of the whole step
SPREAD_COLUMNS = (
    ("phase", "text"),
    ("steps", "number"),
    ("mean", "ms"),
    ("min", "ms"),
    ("max", "ms"),
    ("std", "ms"),
    ("std / mean", "number"),
)
WHOLE_RUN = -1  # the step of every operation where the run has phases but no steps


def step_phase_times(ops: pl.DataFrame) -> pl.DataFrame:
    """Time per (device, step, phase) of the operations inside steps; every pair has every phase.

    Columns: device_id, step, phase (NO_PHASE outside every phase), time_ns.
    """
    stepped = ops.filter(pl.col("step").is_not_null()).with_columns(
        pl.col("phase").fill_null(NO_PHASE)
    )
    times = stepped.group_by("device_id", "step", "phase").agg(
        pl.col("dur_ns").sum().alias("time_ns")
    )
    grid = (
        stepped.select("device_id", "step")
        .unique()
        .join(stepped.select("phase").unique(), how="cross")
    )
    full = grid.join(times, on=["device_id", "step", "phase"], how="left")
    return full.with_columns(pl.col("time_ns").fill_null(0)).sort("device_id", "step", "phase")


def measured_steps(f: Findings) -> pl.DataFrame:
    """The operations of the measured steps the header counts (the step scope), each with
    `step`: its step label, else its step's `index` in structure.parquet; empty without
    measured steps."""
    if f.steps is None:
        return f.run.ops.clear()
    ops = rt.scope_filter(f.run.ops, "step")
    if "s_step" not in ops.columns:  # operations without their place in the structure
        return ops.filter(pl.col("step").is_not_null())
    held = ops.filter(pl.col("s_step").is_not_null())
    return held.with_columns(step=pl.coalesce("step", "s_step"))


def steps_source(f: Findings, held: pl.DataFrame) -> str:
    """Where the measured steps (`held`: their operations) come from, in words: step
    labels (ranges or PyTorch's records), else what the structure found as steps."""
    labels, structure = "from " + rt.label_source(held, "step"), f.run.structure
    if structure is None:
        return labels
    steps = structure.filter((pl.col("kind") == "step") & (pl.col("region") == "measured"))
    found = steps.filter(pl.col("step").is_null())
    evidence = found["evidence"].fill_null("")
    said = [
        words
        for words in (
            _held_by_ranges(found.filter(evidence == "range")),
            _inferred(found.filter(evidence.str.contains("kernel_sequence"))),
        )
        if words
    ]
    if not said:
        return labels
    labelled = steps["step"].is_not_null().any()
    return (labels + "; " if labelled else "no step ranges: ") + "; ".join(said)


def _held_by_ranges(steps: pl.DataFrame) -> str:
    """Steps that are ranges holding a forward and a backward pass, in words ("" without)."""
    names = steps["name"].drop_nulls().unique(maintain_order=True)
    if names.is_empty():
        return ""
    if names.len() > 1:
        return f"ranges such as {code(names[0])} hold a forward and a backward pass each"
    which = "the range" if steps.height == 1 else "each range"
    return f"{which} {code(names[0])} holds a forward and a backward pass"


def _inferred(steps: pl.DataFrame) -> str:
    """Steps found in the kernel sequence, in words ("" without)."""
    if steps.is_empty():
        return ""
    which = "the step is" if steps.height == 1 else "each step is"
    return f"{which} a forward and a backward pass of the repeating kernel sequence"


def steps_caption(f: Findings, held: pl.DataFrame) -> str:
    """The per-step chart's caption: the steps as the report names them, where they come
    from, and what each bar sums."""
    each = "step and device" if held["device_id"].n_unique() > 1 else "step"
    return (
        f"{cap(scope_name(f, 'step'))}, {steps_source(f, held)}. One bar per {each}: "
        "its operations summed per phase (busy time, not wall time)."
    )


def phase_order(phases: list[str]) -> list[str]:
    """Phases in training order (data, zero_grad, forward, ...), unknown ones after, none last."""
    known = [p for p in PHASES if p in phases]
    rest = sorted(p for p in phases if p not in PHASES and p != NO_PHASE)
    return known + rest + ([NO_PHASE] if NO_PHASE in phases else [])


def _colour(phase: str, i: int) -> str:
    return PHASE_COLOURS.get(phase, SERIES[i % len(SERIES)])


def phase_steps_chart(f: Findings) -> Chart | None:
    """Stacked bars: time by phase in each measured step (one bar per step and device);
    where the measured region has no steps but the run has phases, one bar per device
    for the whole run."""
    ops, held = f.run.ops, measured_steps(f)
    times = step_phase_times(held)
    stepped = not times.is_empty()
    if not stepped:
        if ops["phase"].is_null().all():
            return None
        times = step_phase_times(ops.with_columns(step=pl.lit(WHOLE_RUN, pl.Int64)))
    pairs = times.select("device_id", "step").unique().sort("device_id", "step")
    several = pairs["device_id"].n_unique() > 1
    x = [
        (f"step {s}" if stepped else "whole run") + (f" · GPU {d}" if several else "")
        for d, s in zip(pairs["device_id"], pairs["step"], strict=True)
    ]
    drawn, cut = first_rows(len(x), "bars (step and device)")
    phases = phase_order(times["phase"].unique().to_list())
    wide = times.pivot("phase", index=["device_id", "step"], values="time_ns").sort(
        "device_id", "step"
    )
    data = [
        bar(p, x[:drawn], [ms(v) for v in wide[p][:drawn]], _colour(p, i))
        for i, p in enumerate(phases)
    ]
    totals = wide.select(pl.sum_horizontal(phases)).to_series()
    rows = [
        [d, s if stepped else None, *(ms(wide[p][i]) for p in phases), ms(totals[i])]
        for i, (d, s) in enumerate(zip(wide["device_id"], wide["step"], strict=True))
    ]
    caption = (
        steps_caption(f, held)
        if stepped
        else "No steps in the measured region: every operation of the run summed per phase "
        "(busy time, not wall time)."
    )
    return chart(
        "phase_steps",
        "Time by phase in each step" if stepped else "Time by phase",
        caption + cut,
        heading="Time by phase per step" if stepped else "Time by phase, whole run",
        data=data,
        rows=table(
            [
                ("device", "number"),
                ("step", "number"),
                *((p, "ms") for p in phases),
                ("total", "ms"),
            ],
            rows,
        ),
        **stacked("step" if stepped else "run", "ms"),
    )


def _step_times(times: pl.DataFrame, phase: str) -> list[float | None]:
    """The time of `phase` in each step, in ms, by device then step."""
    return [
        ms(v) for v in times.filter(pl.col("phase") == phase).sort("device_id", "step")["time_ns"]
    ]


def phase_spread_chart(f: Findings) -> Chart | None:
    """Box plots: how much each phase's time varies from measured step to step."""
    times = step_phase_times(measured_steps(f))
    if times.select("device_id", "step").unique().height < 2:
        return None
    phases = phase_order(times["phase"].unique().to_list())
    totals = (
        times.group_by("device_id", "step")
        .agg(pl.col("time_ns").sum())
        .with_columns(phase=pl.lit(TOTAL))
    )
    both = pl.concat([times, totals.select(times.columns)])
    colours = {p: _colour(p, i) for i, p in enumerate(phases)} | {TOTAL: "#333333"}
    data = [box(p, _step_times(both, p), colour) for p, colour in colours.items()]
    stats = both.group_by("phase").agg(
        pl.len().alias("steps"),
        pl.col("time_ns").mean().alias("mean"),
        pl.col("time_ns").min().alias("min"),
        pl.col("time_ns").max().alias("max"),
        pl.col("time_ns").std().alias("std"),
    )
    order = {p: i for i, p in enumerate([*phases, TOTAL])}
    rows = [
        [
            r["phase"],
            r["steps"],
            ms(r["mean"]),
            ms(r["min"]),
            ms(r["max"]),
            ms(r["std"]),
            None if not r["mean"] else round(r["std"] / r["mean"], 6),
        ]
        for r in sorted(stats.iter_rows(named=True), key=lambda r: order[r["phase"]])
    ]
    return chart(
        "phase_spread",
        "Step-to-step spread by phase",
        "Each point is one step on one device.",
        heading="Spread across steps",
        data=data,
        rows=table(SPREAD_COLUMNS, rows),
        xaxis=category_axis("phase"),
        yaxis=time_axis("ms per step"),
        showlegend=False,
    )
