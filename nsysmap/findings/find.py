"""Every rule over the inputs, the findings ranked, as the table findings.parquet (pure).

`findings_table(inputs)` runs each rule of RULES (nsysmap.findings.rule_table) on
each input (one process; or the job of several ranks and each of its ranks),
ranks what they find (nsysmap.findings.rank) and writes one FINDINGS row per
finding, every time per step of its device. A finding whose saving, after
those ranked above it took their part, falls below its rule's `min_share`
of the step is left out: its time is already counted above.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import polars as pl

from nsysmap.core.findings_schema import FINDINGS
from nsysmap.findings.finding import LOW, Finding
from nsysmap.findings.inputs import CAPTURE, Inputs
from nsysmap.findings.rank import Ranked, ranked
from nsysmap.findings.rule_table import MIN_SHARE, RULES

# What a profile without steps or phases lacks for more than a low confidence.
NO_STEPS = (
    "step ranges (NVTX `step N`, ProfilerStep, or `nsysmap run`): without them the whole "
    "capture, set-up included, counts as one, its figures totals over it"
)


# ... and one narrowed to the measured region its structure found (nsysmap.structure).
NO_STEPS_REGION = (
    "step ranges (NVTX `step N`, ProfilerStep, or `nsysmap run`): without them the measured "
    "region of structure.parquet (set-up and warm-up left out) counts as one, its figures "
    "totals over it"
)


def findings(inputs: Sequence[Inputs]) -> list[Finding]:
    """What every rule finds in every input, each with its steps and step time; low
    confidence, saying why, where the input has neither steps nor phases."""
    out = []
    for x in inputs:
        for rule in RULES:
            for f in rule.detect(x, rule):
                if not f.steps:
                    count, ns = x.step_count(f.device_id), x.step_ns(f.device_id)
                    f = replace(f, steps=count, step_ns=ns, stepped=x.per_step)
                if x.basis == CAPTURE and x.across is None:
                    lacks = NO_STEPS if x.region is None else NO_STEPS_REGION
                    needs = lacks if f.needs is None else f"{f.needs}; {lacks}"
                    f = replace(f, confidence=LOW, needs=needs)
                out.append(f)
    return out


def findings_table(inputs: Sequence[Inputs]) -> pl.DataFrame:
    """findings.parquet: the findings of `inputs`, ranked (see the module docstring)."""
    kept = [r for r in ranked(findings(inputs)) if _worth(r)]
    renumber = {r.priority: i for i, r in enumerate(kept, start=1)}
    rows = [_row(r, i, renumber) for i, r in enumerate(kept, start=1)]
    return pl.DataFrame(rows, schema=FINDINGS, orient="row")


def _worth(r: Ranked) -> bool:
    """Still worth a finding once those above took their part (unknown savings stay)."""
    if r.saving_ns is None:
        return True
    f = r.finding
    return f.per_step(r.saving_ns) >= f.rule.value(MIN_SHARE) * f.step_ns and r.saving_ns > 0


def _row(r: Ranked, priority: int, renumber: dict[int, int]) -> tuple:
    f = r.finding
    saving = None if r.saving_ns is None else f.per_step(r.saving_ns)
    above = [renumber[p] for p in r.overlaps if p in renumber]
    return (
        priority,
        f.key,
        f.rule.id,
        f.rule.title_for(f.stepped),
        f.rank,
        f.device_id,
        f.phase,
        f.module,
        f.range_path,
        f.place,
        f.evidence,
        f.evidence_rows,
        max(f.steps, 1),
        f.step_ns,
        f.stepped,
        f.per_step(f.basis_ns),
        saving,
        saving / f.step_ns if saving is not None and f.step_ns else None,
        f.upper_bound,
        f.estimate,
        f.confidence,
        f.fix or f.rule.fix_for(f.stepped),
        f.rule.doc,
        f.needs,
        ", ".join(f"#{p}" for p in above) or None,
    )
