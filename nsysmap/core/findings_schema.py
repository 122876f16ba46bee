"""Declared schema of findings.parquet: what to fix first (nsysmap.findings, docs/findings.md)."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from nsysmap.core.schemas import declare

# One row per finding, ranked by estimated saving per step (docs/findings.md).
FINDINGS = declare(
    {
        "priority": pl.Int64,  # 1: fix first (largest saving per step)
        "finding_key": pl.String,  # the rule and where, the same in every run: diff matches on it
        "rule": pl.String,  # fp32_gemm, launch_bound, ... (nsysmap.findings.rule_table)
        "title": pl.String,  # what the rule finds, in words
        "rank": pl.Int64,  # the process's rank (several reports), else null
        "device_id": pl.Int64,  # null: every device of the rank or job
        "phase": pl.String,  # null: the whole step
        "module": pl.String,  # a module or layer path (numbers as *); null: none
        "range_path": pl.String,  # a range path the finding is about; null: none
        "place": pl.String,  # where, in words
        "evidence": pl.String,  # the numbers that show it, in words
        "evidence_rows": pl.String,  # the tables and rows that hold them
        "steps": pl.Int64,  # steps the per-step figures average over (1: whole capture)
        "step_ns": pl.Int64,  # the device's mean step wall time
        # The figures are per measured step; false: no step is measured, and the measured
        # work counts as one (figures are totals over it, shares are of its wall time).
        "per_step": pl.Boolean,
        "basis_ns_per_step": pl.Int64,  # the time the saving is taken from, per step
        "saving_ns_per_step": pl.Int64,  # estimated saving per step; null: cannot tell
        "saving_share": pl.Float64,  # saving_ns_per_step / step_ns
        "upper_bound": pl.Boolean,  # the saving is an upper bound
        "estimate": pl.String,  # how the saving was estimated
        "confidence": pl.String,  # high, medium, low
        "fix": pl.String,  # what to change: the option, call or code
        "doc": pl.String,  # the docs page and section that explains the rule
        "needs": pl.String,  # what the profile lacks to say more; null: nothing
        "overlaps": pl.String,  # findings ranked above that took part of the same time
    }
)


def per_words(per_step: bool | None) -> str:
    """What follows a finding's time or count: " per step", or nothing where no step is
    measured (the figure is a total over the measured work). None (an output written
    before the column): per step, as it said then."""
    return "" if per_step is False else " per step"


def share_words(per_step: bool | None) -> str:
    """What a finding's share is of: "the step", or "the measured wall time" where no step is
    measured (the measured work's wall time on the device, not its operations' summed
    time)."""
    return "the measured wall time" if per_step is False else "the step"


STEPS, MEASURED, BOTH = "steps", "measured", "both"


def basis_of(per_steps: Iterable[bool | None]) -> str:
    """What a list of findings' figures are over: STEPS (every one per step, or written
    before the column), MEASURED (none: the measured time) or BOTH (the ranks of a job,
    some with steps and some without)."""
    stepped = {p is not False for p in per_steps}
    return MEASURED if stepped == {False} else BOTH if stepped == {True, False} else STEPS


# How a list of findings ranks, by `basis_of`.
SAVING_WORDS = {
    STEPS: "estimated saving per step",
    MEASURED: "estimated saving over the measured time",
    BOTH: "estimated saving per step, or over the measured time where no step is measured",
}


def saving_words(per_steps: Iterable[bool | None]) -> str:
    """How a list of findings ranks (SAVING_WORDS of their `basis_of`)."""
    return SAVING_WORDS[basis_of(per_steps)]
