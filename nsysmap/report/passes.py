"""The user's rules a run was attributed with, and where they made an answer worse.

The step and phase rules (`--step`, `--phase`) and the measured-region rule
(`--measure`) are recorded in manifest.json's options. The structure model
(nsysmap.structure) counts the passes; this module says where a rule did
not do what it was given for::

    --measure '^bench$'     names no range holding passes     -> said, not used
    --step 'warmup_iter_(\\d+)'  steps that are all warm-up work -> said: none measured
    --phase 'forward=^timed_iterations$'  one range, three passes -> three passes (said)
"""

from __future__ import annotations

from typing import Any

import polars as pl

from nsysmap.attribution.rules import NameRules, user_rules
from nsysmap.structure.words import code


def _options(manifest: dict[str, Any]) -> dict[str, Any]:
    options = manifest.get("options")
    return options if isinstance(options, dict) else {}


def manifest_rules(manifest: dict[str, Any]) -> NameRules:
    """The step and phase rules the run was attributed with (manifest.json `options`)."""
    options = _options(manifest)
    steps = [str(rule) for rule in options.get("step_rules") or []]
    phases = [str(rule) for rule in options.get("phase_rules") or []]
    return user_rules(steps, phases)


def measure_rules(manifest: dict[str, Any]) -> tuple[str, ...]:
    """The `--measure` rules the run was attributed with."""
    return tuple(str(rule) for rule in _options(manifest).get("measure_rules") or [])


def rule_notes(manifest: dict[str, Any], structure: pl.DataFrame) -> list[str]:
    """Sentences on the user's rules that did not do what they were given for."""
    notes = []
    measure = measure_rules(manifest)
    regions = structure.filter(pl.col("kind") == "region")
    measured = regions.filter(pl.col("region") == "measured")
    if measure and not measured["evidence"].str.contains("rule").any():
        rules = ", ".join(code(rule, width=None) for rule in measure)
        notes.append(
            f"The --measure rule {rules} names no range holding a pass: the measured region "
            "was found without it."
        )
    steps = structure.filter(pl.col("kind") == "step")
    if _options(manifest).get("step_rules") and steps.height:
        warm = steps.filter(pl.col("region") == "warmup").height
        if warm == steps.height:
            notes.append(
                f"The --step rule gives {warm:,} step{'s' if warm != 1 else ''}, all of them "
                "warm-up work: the measured region holds none, so the step answers cover the "
                "measured region without steps."
            )
    return notes
