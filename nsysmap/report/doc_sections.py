"""Report sections on where time and FLOPs go, rendered from answers.json alone.

By phase, layer, range, block (measured and inferred), kernel category, and
operator shapes: each function takes its part of the answers document
(nsysmap.report.answer_doc) and returns Markdown lines.
"""

from __future__ import annotations

from typing import Any

from nsysmap.core.inert import clipped, markdown_code, markdown_text
from nsysmap.core.units import operation_word
from nsysmap.infer.summary import CONFIDENCE_WEAK
from nsysmap.report.blocks import part_label
from nsysmap.report.format import (
    OUTSIDE_PHASES,
    flop,
    kernel,
    ms,
    names,
    num,
    pct,
    sentence,
    table,
)
from nsysmap.report.operator_shapes import families_text


def denominator(total: int, everything: int, scope: str) -> str:
    """The sentence naming what a section's shares divide by (`scope`: the step scope's name)."""
    if total == everything:
        return f"Shares are of all operations' time ({ms(total)}), devices together."
    return (
        f"Shares are of the time in the {scope} ({ms(total)} of {ms(everything)} in "
        "all), devices together; the summary of `nsysmap attribute` divides by all of it."
    )


def phases_section(doc: dict[str, Any]) -> list[str]:
    answer = doc["answers"]["phase_time"]
    rows = [
        [
            r["phase"] or OUTSIDE_PHASES,
            f"{r['ops']:,}",
            ms(r["time_ns"]),
            pct(r["time_share"]),
            flop(r["matmul_flop"]),
            num(r["tflops_per_s"], 3),
            pct(r["mfu"]),
        ]
        for r in answer["phases"]
    ]
    header = ["phase", "ops", "time", "share", "matmul FLOPs", "TFLOP/s", "MFU"]
    lines = ["## Where the time goes: by phase", ""]
    if answer["unknown"]:
        lines += [sentence(answer["unknown"]), ""]
    lines += [denominator(answer["time_ns"], answer["all_time_ns"], "phases"), ""]
    utilisation = _utilisation(doc["answers"]["flop_rate"], doc["run"].get("steps"))
    return [*lines, *utilisation, *table(header, rows)]


def _utilisation(rate: dict[str, Any], steps: int | None) -> list[str]:
    """Totals: FLOPs, achieved rate and MFU over their time and over the steps' wall time
    (the step's, when there is one)."""
    if rate["unknown"]:
        return []
    lines = [
        f"Matmul FLOPs: {flop(rate['matmul_flop'])} in {ms(rate['flop_time_ns'])} of operations "
        f"whose FLOPs are counted ({pct(rate['flop_time_share'])} of {ms(rate['time_ns'])}): "
        f"{num(rate['tflops_per_s'], 3)} TFLOP/s, MFU {pct(rate['mfu'])}.",
    ]
    if rate["step_wall_ns"]:
        whose = "the step's" if steps == 1 else "the steps'"
        per = "per device" if steps == 1 else "per step and device"
        lines.append(
            f"Over {whose} wall time ({ms(rate['step_wall_ns'])}, first start to last end "
            f"{per}): MFU {pct(rate['mfu_step_wall'])}."
        )
    return [*lines, ""]


def _per(value: float | None, count: int) -> float | None:
    return None if value is None or not count else value / count


def layers_section(doc: dict[str, Any]) -> list[str]:
    answer = doc["answers"]["layer_time"]
    steps = answer["per_step"] or 1
    each = "per module and step" if answer["per_step"] else "per module"
    rows = [
        [
            markdown_code(r["layer"] or "(root)"),
            markdown_text(r["module_class"] or "–"),
            f"{r['modules']:,}",
            ms(r["time_ns"] / steps),
            ms(r["forward_ns"] / steps),
            ms(r["backward_ns"] / steps),
            flop(_per(r["matmul_flop"], steps * r["modules"])),
            flop(_per(r["other_flop_estimate"], steps * r["modules"])),
            num(r["tflops_per_s"], 3),
            pct(r["mfu"]),
        ]
        for r in answer["layers"]
    ]
    header = [
        "layer",
        "class",
        "modules",
        "time per step" if answer["per_step"] else "time",
        "forward",
        "backward",
        f"matmul FLOPs {each}",
        f"other FLOPs ≈ {each}",
        "TFLOP/s",
        "MFU",
    ]
    lines = ["## Where the time goes: by layer", ""]
    if answer["unknown"]:
        return [*lines, sentence(answer["unknown"]), ""]
    shown = f"top {len(answer['layers'])} of {answer['layers_total']:,} by time"
    lines.append(f"Numbered modules collapsed to `*`; {shown}; own time only")
    lines.append("(a module's kernels, not its submodules'); forward and backward are the time in")
    lines.append("forward and in backward calls, whatever the phase; a step is one step on one")
    lines.append("device.")
    return [*lines, "", *table(header, rows)]


def ranges_section(answer: dict[str, Any]) -> list[str]:
    """Time per range path: the user's ranges by time inside them, every path by own time."""
    lines = ["## Where the time goes: by range", ""]
    if answer.get("unknown"):
        return [*lines, sentence(answer["unknown"]), ""]
    lines.append("Whole capture, devices pooled. *Inside*: the range and every range below it;")
    lines.append("*own*: operations whose innermost range it is (they add up to all time);")
    lines.append("*GPU span*: first GPU start to last GPU end of each call, summed.")
    which = "The profile's own ranges" if answer["user_ranges_only"] else "Ranges"
    inside = [
        [
            name,
            f"{r['calls']:,}",
            ms(r["time_ns"]),
            ms(r["inclusive_ns"]),
            pct(r["inclusive_share"]),
            ms(r["span_ns"]),
        ]
        for name, r in zip(_paths(answer["inside"]), answer["inside"], strict=True)
    ]
    own = [
        [name, f"{r['calls']:,}", f"{r['ops']:,}", ms(r["time_ns"]), pct(r["time_share"])]
        for name, r in zip(_paths(answer["own"]), answer["own"], strict=True)
    ]
    lines += ["", f"{which} with the most time inside them:", ""]
    lines += table(["range", "calls", "own", "inside", "share inside", "GPU span"], inside)
    lines += ["Range paths with the most own time:", ""]
    return lines + table(["range", "calls", "ops", "own", "share"], own)


def _paths(rows: list[dict[str, Any]]) -> list[str]:
    """The range paths of a table's rows, within 100 characters, told apart where they
    would read alike once cut (format.names)."""
    return names([r["range_path"] for r in rows], 100)


def blocks_section(answer: dict[str, Any]) -> list[str]:
    lines = ["## Per block: phases and parts", ""]
    if answer["unknown"]:
        return [*lines, sentence(answer["unknown"]), ""]
    steps = answer["per_step"] or 1
    shown = answer["parts"]
    rest = any(r["other_parts_ns"] is not None for r in answer["rows"])
    rows = [
        [
            markdown_code(r["block"]),
            markdown_text(r["block_class"] or "–"),
            ms(r["time_ns"] / steps),
            ms(r["forward_ns"] / steps),
            ms(r["backward_ns"] / steps),
            ms(r["other_ns"] / steps),
            *(ms(r["parts_ns"][p] / steps) for p in shown),
            *([ms(r["other_parts_ns"] / steps)] if rest else []),
            num(r["tflops_per_s"], 3),
            pct(r["mfu"]),
        ]
        for r in answer["rows"]
    ]
    header = [
        "block",
        "class",
        "time per step" if answer["per_step"] else "time",
        "forward",
        "backward",
        "no direction",
        *(markdown_code(part_label(p)) for p in shown),
        *(["other parts"] if rest else []),
        "TFLOP/s",
        "MFU",
    ]
    lines.append("Each block with every module below it; parts are its direct children,")
    lines.append("`(own)` its own operations (residual adds). Forward and backward are the time")
    lines.append("in forward and in backward calls, whatever the phase. Devices pooled; a step")
    lines.append("is one step on one device.")
    return [*lines, "", *table(header, rows)]


def inferred_section(answer: dict[str, Any]) -> list[str]:
    """Blocks inferred from the kernel sequence, when the run has no numbered modules."""
    if not answer["shown"]:
        return []
    lines = [
        "## Per block, inferred from the repeating kernel sequence",
        "",
        "No ranges name the blocks; these are repeats of one kernel motif found in the "
        "kernel sequence (docs/inference.md), not measured modules. Inferred block –: "
        "work of that inferred phase outside every repeat. Shares are of the device's time.",
        "",
    ]
    for device in answer["devices"]:
        # the CPU backend's operators run on no device (-1): their time is CPU time
        cpu = device["device_id"] is None or device["device_id"] < 0
        who = "CPU operators" if cpu else f"Device {device['device_id']}"
        said = f"{who}: {pct(device['placed_share'])} of {'CPU' if cpu else 'GPU'} time in "
        said += "inferred blocks."
        if device.get("weak"):
            sure = device["confidence"]
            # The confidence is the kernel sequence's: said beside what it measures.
            confidence = f"(confidence {sure:.2f})"
            what = f"no clear repeating structure {confidence}"
            if not device.get("blocks_found", True) and sure >= CONFIDENCE_WEAK:
                word = operation_word(cpu, True)
                what = f"the sequence of {word} repeats {confidence}, with no repeating blocks"
                what += " in it"
            said += (
                f" **Weak**: {what}; treat the rows below as a guess, not as the profile's phases."
            )
        lines += [said, ""]
        cells = [
            [
                r["inferred_phase"] or "–",
                r.get("inferred_region") or "–",
                "–" if r["inferred_block"] is None else str(r["inferred_block"]),
                f"{r['ops']:,}",
                ms(r["time_ns"]),
                pct(r["time_share"]),
                kernel(r["top_kernel"] or "", 50),
            ]
            for r in device["rows"]
        ]
        header = ["inferred phase", "region", "inferred block", "ops", "time", "share"]
        header.append("top kernel")
        lines += [*table(header, cells), ""]
    return lines


def categories_section(doc: dict[str, Any]) -> list[str]:
    answer = doc["answers"]["categories"]
    rows = [
        [
            r["category"] or "–",
            f"{r['ops']:,}",
            ms(r["time_ns"]),
            pct(r["time_share"]),
            flop(r["matmul_flop"]),
            flop(r["other_flop_estimate"]),
            pct(r["flop_share"]),
        ]
        for r in answer["rows"]
    ]
    header = [
        "category",
        "ops",
        "time",
        "time share",
        "matmul FLOPs",
        "other FLOPs ≈",
        "FLOP share",
    ]
    lines = ["## Kernel categories: share of time and share of FLOPs", ""]
    scope = doc["scopes"]["step"]["label"]
    lines += [denominator(answer["time_ns"], answer["all_time_ns"], scope), ""]
    if any(r["flop_share"] is not None for r in answer["rows"]):
        lines += [
            "FLOP shares are of the FLOPs counted (operations whose operator's FLOPs are",
            "known); – where none of a category's FLOPs could be counted.",
            "",
        ]
    return [*lines, *table(header, rows)]


def _per_call(r: dict[str, Any]) -> str:
    value = flop(r["matmul_flop_per_call"] or r["other_flop_estimate_per_call"])
    return value if r["flop_counted"] else f"{value} (counted in its children)"


def shapes_section(answer: dict[str, Any], full: bool) -> list[str]:
    lines = ["## Input shapes", ""]
    if answer["unknown"]:
        return [*lines, sentence(answer["unknown"]), ""]
    lines += [
        f"The operators of these families: {families_text()}; one row per operator,",
        "direction and input shapes as PyTorch recorded them, calls inside modules only where",
        "the profile has modules. Calls are operator calls, not kernels. Direction: the",
        "module call's, else the phase the call ran in (forward or backward); – where neither",
        "says it (the loss, work outside those phases).",
        "",
    ]
    rows = [
        [
            r["family"],
            markdown_code(r["aten_op"]),
            r["direction"] or "–",
            markdown_code(r["input_shapes"]),
            f"{r['calls']:,}",
            _per_call(r),
            markdown_text(clipped(r["layers"] or "", 80)),
        ]
        for r in answer["asked"]
    ]
    header = [
        "family",
        "operator",
        "direction",
        "input shapes",
        "calls",
        "FLOPs per call",
        "layers",
    ]
    lines += table(header, rows)
    if not full:
        return lines
    every = [
        [
            markdown_code(r["module"] or "(root)"),
            markdown_code(r["aten_op"]),
            r["direction"] or "–",
            markdown_code(r["input_shapes"]),
            f"{r['calls']:,}",
        ]
        for r in answer["every_module"]
    ]
    return [
        *lines,
        "### Every module",
        "",
        *table(["module", "operator", "direction", "input shapes", "calls"], every),
    ]
