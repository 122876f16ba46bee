"""The structure in words and counts, one source for every renderer (pure).

`structure_summary` is answers.json's `structure` (counts per region, devices
pooled); `structure_lines` says it in the sentences that the terminal summary,
report.md and the HTML page print alike::

    measured: 3 forward passes inside `timed_iterations`, 4.763 ms of GPU time
      (29.9 % of all); from the kernel sequence, the range; confidence 1.00
    set-up: 20 operations before the first pass, in `setup_model`, 8.000 ms of GPU
      time (50.2 % of all)
    warm-up: 2 forward passes inside `warm_up`, 3.185 ms of GPU time (20.0 % of all);
      from the range

A region's time is the summed duration of its operations, not its wall time: GPU
time, or CPU operator self time for a trace without GPU work, whose operations are
CPU operators (`cpu=True`); the terminal summary's shares are of the same unit.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from nsysmap.core.inert import clipped, visible
from nsysmap.core.scalars import to_float, to_int
from nsysmap.core.units import time_unit
from nsysmap.structure.table import DIRECTIONS, REGIONS

EVIDENCE_WORDS = {
    "range": "the range",
    "records": "PyTorch's records",
    "module_calls": "the module calls",
    "repeated_ranges": "ranges repeated as often in each pass",
    "kernel_sequence": "the kernel sequence",
    "position": "its position",
    "duration": "its launch time (the first pass, many times slower)",
    "rule": "the --measure rule",
}
_REGION_WORDS = {"setup": "set-up", "warmup": "warm-up", "measured": "measured", "tail": "tail"}

# A pass the answers count: one with operations (a phase range the capture cut, with nothing
# left in it, is no pass).
COUNTED_PASS = (pl.col("kind") == "pass") & (pl.col("ops") > 0)


# A name quoted in a sentence is cut to this many characters (a range named by a whole
# dictionary of call-site fields runs to hundreds); answers.json's `name` keeps it whole.
NAME_WIDTH = 100


def code(name: str, width: int | None = NAME_WIDTH) -> str:
    """A range name as code: in backticks, its own backticks as quotes, its control and
    format characters as escapes (nsysmap.core.inert.visible), so that the sentence is
    inert in every renderer that shows it; cut to `width` characters (None: whole)."""
    cut = name if width is None else clipped(name, width)
    return "`" + visible(cut).replace("`", "'") + "`"


def plural(n: int, noun: str) -> str:
    """ "1 pass", "3 passes", "2 copies", "4 operations"."""
    if n == 1:
        return f"{n:,} {noun}"
    if noun.endswith("s"):
        return f"{n:,} {noun}es"
    if noun.endswith("y"):
        return f"{n:,} {noun[:-1]}ies"
    return f"{n:,} {noun}s"


def region_counts(table: pl.DataFrame, region: str) -> dict[str, Any]:
    """The region's operations, time, passes per direction and steps, devices pooled."""
    rows = table.filter(pl.col("region") == region)
    whole = rows.filter(pl.col("kind") == "region")
    passes = rows.filter(COUNTED_PASS)
    steps = rows.filter(pl.col("kind") == "step")
    names = whole["name"].drop_nulls().unique(maintain_order=True).to_list()
    evidence = sorted({e for text in whole["evidence"].drop_nulls() for e in text.split(", ")})
    with_backward = steps.join(
        passes.filter(pl.col("direction") == "backward").select(
            "device_id", "pid", index="step_index"
        ),
        on=["device_id", "pid", "index"],
        how="semi",
        nulls_equal=True,
    )
    return {
        "region": region,
        "ops": int(whole["ops"].sum()),
        "time_ns": int(whole["time_ns"].sum()),
        "name": names[0] if names else None,
        "evidence": evidence,
        "confidence": to_float(whole["confidence"].min()) if whole.height else None,
        **{f"{d}_passes": int((passes["direction"] == d).sum()) for d in DIRECTIONS},
        "steps": steps.height,
        "steps_with_backward": with_backward.height,
        "held_ns": held_ns(steps, passes),
        "devices": whole["device_id"].n_unique(),
    }


def held_ns(steps: pl.DataFrame, passes: pl.DataFrame) -> int | None:
    """The time a region's steps hold, or its passes' where a device and process has no
    step: less than the region's where it holds work outside them (the input copies
    before a decode step's pass); None without either."""
    if not (steps.height or passes.height):
        return None
    keys = ["device_id", "pid"]
    stepped = steps.select(keys).unique()
    unstepped = passes.join(stepped, on=keys, how="anti", nulls_equal=True)
    return to_int(steps["time_ns"].sum()) + to_int(unstepped["time_ns"].sum())


def structure_summary(table: pl.DataFrame, total_ns: int, *, cpu: bool) -> dict[str, Any]:
    """answers.json's `structure`: each region's counts, the measured one's apart, and the
    sentences (times in CPU operator self time where `cpu`, else GPU time)."""
    present = [r for r in REGIONS if (table["region"] == r).any()]
    regions = [region_counts(table, r) for r in present]
    for entry in regions:
        entry["share"] = entry["time_ns"] / total_ns if total_ns else None
    measured = next((r for r in regions if r["region"] == "measured"), None)
    return {
        "regions": regions,
        "measured": measured,
        "lines": structure_lines(table, total_ns, cpu=cpu),
        "notes": structure_notes(table),
    }


def passes_phrase(counts: dict[str, Any]) -> str:
    """ "3 forward passes", "5 steps (5 forward and 5 backward passes)", or ""."""
    passes = [(counts[f"{d}_passes"], d) for d in DIRECTIONS if counts[f"{d}_passes"]]
    said = [f"{n:,} {d}" for n, d in passes]
    listed = " and ".join([", ".join(said[:-1]), said[-1]] if len(said) > 2 else said)
    if passes:
        listed += " pass" if sum(n for n, _ in passes) == 1 else " passes"
    if counts["steps"]:
        steps = plural(counts["steps"], "step")
        return f"{steps} ({listed})" if listed else steps
    return listed


def region_line(counts: dict[str, Any], total_ns: int, *, cpu: bool) -> str:
    """One region in words: what it holds, where, its time (its operations' summed GPU
    time, or CPU operator self time where `cpu`), how it was found."""
    region = counts["region"]
    held = passes_phrase(counts)
    name = counts["name"]
    if region == "setup":
        what = plural(counts["ops"], "operation") + " before the first pass"
        where = f", in {code(name)}" if name else ""
    elif region == "tail":
        what, where = plural(counts["ops"], "operation") + " after the measured passes", ""
    else:
        what = held or plural(counts["ops"], "operation") + " (no pass found)"
        where = f" inside {code(name)}" if name else ""
    devices = counts.get("devices") or 1
    if held and devices > 1:  # passes and steps are counted over the devices together
        what += f" on {devices} devices"
    share = f"{100 * counts['time_ns'] / total_ns:.1f} % of all" if total_ns else ""
    inside = _held(counts) if held and region in ("warmup", "measured") else ""
    share = f" ({'; '.join(s for s in (share, inside) if s)})" if share or inside else ""
    time = f"{counts['time_ns'] / 1e6:,.3f} ms of {time_unit(cpu)}"
    line = f"{_REGION_WORDS[region]}: {what}{where}, {time}{share}"
    words = EVIDENCE_WORDS | ({"kernel_sequence": "the operator sequence"} if cpu else {})
    found = [words.get(e, e) for e in counts["evidence"]]
    if region in ("warmup", "measured") and found:
        line += "; from " + ", ".join(found)
    if region == "measured" and counts["confidence"] is not None:
        line += f"; confidence {counts['confidence']:.2f}"
    return line


def _held(counts: dict[str, Any]) -> str:
    """ "10.675 ms in the pass" where the steps (else the passes) hold less of the
    region's time than all of it, as printed (in whole microseconds); else ""."""
    held = counts.get("held_ns")
    if held is None or not 0 < round(held / 1e3) < round(counts["time_ns"] / 1e3):
        return ""  # all of the region's time as printed (a step may run past its end)
    if counts["steps"]:
        unit = "step" if counts["steps"] == 1 else "steps"
    else:
        n = sum(counts[f"{d}_passes"] for d in DIRECTIONS)
        unit = "pass" if n == 1 else "passes"
    return f"{held / 1e6:,.3f} ms in the {unit}"


def structure_lines(table: pl.DataFrame, total_ns: int | None = None, *, cpu: bool) -> list[str]:
    """The structure in sentences: the measured region first, then the others in order;
    times in CPU operator self time where `cpu` (a trace without GPU work), else GPU time."""
    if total_ns is None:
        total_ns = int(table.filter(pl.col("kind") == "region")["time_ns"].sum())
    present = [r for r in REGIONS if (table["region"] == r).any()]
    ordered = [r for r in present if r == "measured"] + [r for r in present if r != "measured"]
    lines = [region_line(region_counts(table, r), total_ns, cpu=cpu) for r in ordered]
    return lines + structure_notes(table)


def structure_notes(table: pl.DataFrame) -> list[str]:
    """What a reader should know about how the passes were found."""
    notes = []
    split = table.filter(COUNTED_PASS & (pl.col("evidence") == "range, kernel_sequence"))
    for (name,), rows in split.group_by("name", maintain_order=True):
        notes.append(
            f"The range {code(str(name))} gives a direction but holds {rows.height} passes of "
            "the kernel sequence: each counts as one pass."
        )
    return notes
