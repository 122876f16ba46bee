"""Sections of the Markdown on the profile's structure, its copies and memsets, and softmax
against the attention matmuls, rendered from answers.json alone (nsysmap.report.markdown
puts them in order)."""

from __future__ import annotations

from typing import Any

from nsysmap.report.brief import brief_copies
from nsysmap.report.format import cap, flop, kernel, ms, pct, ratio, table
from nsysmap.report.softmax_answer import attention_coverage

REGION_WORDS = {"setup": "set-up", "warmup": "warm-up", "measured": "measured", "tail": "tail"}


def structure_section(doc: dict[str, Any]) -> list[str]:
    """The structure model's regions, steps and passes: what every scope is made of."""
    structure = doc.get("structure")
    if not structure:
        return []
    lines = ["## Structure of the profile", ""]
    lines += [f"- {line[0].upper()}{line[1:]}" for line in structure["lines"]]
    lines += [
        "",
        "Every answer below is over instances of this structure (docs/report.md, *The",
        "structure model*): the measured passes and steps, the rest left out and said.",
        "",
    ]
    return lines


def copies_section(doc: dict[str, Any]) -> list[str]:
    """Copies and memsets: no kernels, so apart from the kernel answers."""
    answer = doc["answers"].get("copies") or {}
    if answer.get("unknown") or not answer.get("rows"):
        return []
    lines = ["## Copies and memsets", ""]
    lines.append(f"Copies and memsets are no kernels: {brief_copies(answer)}")
    rows = [
        [
            kernel(r["name"], 60),
            f"{r['calls']:,}",
            ms(r["time_ns"]),
            pct(r["share"]),
            ", ".join(f"{REGION_WORDS.get(k, k)} {ms(v)}" for k, v in r["regions_ns"].items()),
        ]
        for r in answer["rows"]
    ]
    return [*lines, "", *table(["operation", "calls", "time", "share of all", "where"], rows)]


_ATTENTION_FROM = {
    "modules": "attention modules are those whose class name says attention.",
    "ranges": (
        "no attention module, so from the profile's own ranges: time launched inside a\n"
        "range whose name mentions softmax (attention softmax), or matmul or scores (attention\n"
        "matmuls), within a range named for attention where the profile has one."
    ),
    None: "no attention module and no range named for softmax or the attention matmuls.",
}


def scope_name(doc: dict[str, Any], scope: str) -> str:
    """A scope as answers.json names it (its instances of the structure)."""
    return str(doc["scopes"].get(scope, {}).get("label", scope))


def per_element_text(per: dict[str, Any] | None) -> str | None:
    """The FLOPs per element the softmax estimate used, in words (None without FLOPs)."""
    if per is None:
        return None
    if not per["operators"]:
        return None
    counted = ", ".join(f"`{o['aten_op']}` {o['per_element']}" for o in per["operators"])
    if per["document"]:
        return f"{counted} per element (the model's FLOP document)"
    text = f"{counted} per element ({per['total']} in all)"
    if per["uncounted"]:
        text += "; not counted: " + ", ".join(f"`{op}`" for op in per["uncounted"])
    return text


def softmax_section(doc: dict[str, Any]) -> list[str]:
    answer = doc["answers"]["softmax_vs_matmul"]
    source = answer["attention_source"]
    where = {"ranges": "attention ranges", "modules": "attention modules"}.get(source, "attention")
    attention, category = answer["attention"], answer["by_kernel_category"]
    whole = (
        " (whole ranges: every operation in them)" if attention["time"].get("whole_ranges") else ""
    )
    t = attention["time"]
    rows = [[f"time, {where}{whole}", ms(t["softmax_ns"]), ms(t["matmul_ns"]), ratio(t["ratio"])]]
    if t.get("whole_ranges"):
        rows.append(
            [
                f"time, {where} (matmul kernels only)",
                ms(t["softmax_ns"]),
                ms(t.get("matmul_kernel_ns")),
                ratio(t.get("kernel_ratio")),
            ]
        )
    for label, block in (
        (where, attention),
        ("softmax kernels, attention matmul kernels", category),
    ):
        fl = block["flops"]
        if label != where:
            ct = block["time"]
            rows.append(
                [f"time, {label}", ms(ct["softmax_ns"]), ms(ct["matmul_ns"]), ratio(ct["ratio"])]
            )
        rows.append(
            [
                f"FLOPs, {label}",
                flop(fl["softmax_flop"]),
                flop(fl["matmul_flop"]),
                ratio(fl["ratio"]),
            ]
        )
    lines = ["## Softmax versus the attention matmuls", ""]
    lines.append(f"{cap(scope_name(doc, 'step'))}; {_ATTENTION_FROM[source]}")
    covered = attention_coverage(answer)
    if covered:
        lines.append(
            f"The {where} hold work of {covered} only, so the two rows of the {where} cover it; "
            f"the kernel rows cover all of the {scope_name(doc, 'step')}."
        )
    if t.get("whole_ranges"):
        lines.append(
            "The attention matmul ranges' whole time counts every operation launched in them "
            "(scaling, copies, reshapes); the matmul kernels only row counts their matmul "
            "kernels alone."
        )
    lines.append(
        "Kernel rows: kernels of category `softmax` against the matmul kernels of the "
        f"attention {'modules' if source == 'modules' else 'matmul ranges'}."
    )
    for label, block in (("attention", attention), ("softmax kernel", category)):
        said = per_element_text(block["flops"].get("per_element"))
        if said:
            lines.append(f"Softmax FLOPs ({label} rows) are estimates: {said}.")
    lines += ["", *table(["", "softmax", "matmul", "softmax / matmul"], rows)]
    reasons = sorted(
        {
            str(e["unknown"])
            for block in (attention, category)
            for e in block.values()
            if isinstance(e, dict) and e.get("unknown")
        }
    )
    return [*lines, f"Unknown where marked –: {'; '.join(reasons)}.", ""] if reasons else lines
