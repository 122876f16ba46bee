"""Sections of the Markdown on the profile's structure, its copies and memsets, and softmax
against the attention matmuls, rendered from answers.json alone (nsysmap.report.markdown
puts them in order)."""

from __future__ import annotations

from typing import Any

from nsysmap.core.inert import markdown_code
from nsysmap.report.brief import brief_copies
from nsysmap.report.format import cap, flop, kernel, ms, pct, ratio, table
from nsysmap.report.softmax_answer import attention_coverage

REGION_WORDS = {"setup": "set-up", "warmup": "warm-up", "measured": "measured", "tail": "tail"}
# ... and the copies table's words for operations in none ("before the capture 0.187 ms").
_COPY_WORDS = {**REGION_WORDS, "before_capture": "before the capture", "outside": "outside"}


def structure_section(doc: dict[str, Any]) -> list[str]:
    """The structure model's regions, steps and passes: what every scope is made of."""
    structure = doc.get("structure")
    if not structure:
        return []
    lines = ["## Structure of the profile", ""]
    lines += [f"- {line[0].upper()}{line[1:]}" for line in structure["lines"]]
    lines += [
        "",
        "Every answer below is over instances of this structure",
        "(docs/report.md, *The structure model*): the measured passes and steps, the rest",
        "left out and said.",
        "",
    ]
    return lines


def copies_section(doc: dict[str, Any]) -> list[str]:
    """Copies and memsets: no kernels, so apart from the kernel answers."""
    answer = doc["answers"].get("copies") or {}
    if answer.get("unknown") or not answer.get("rows"):
        return []
    lines = ["## Copies and memsets", ""]
    lines.append(f"Copies and memsets are no kernels: {brief_copies(answer, markdown_code)}")
    rows = [
        [
            kernel(r["name"], 60),
            f"{r['calls']:,}",
            ms(r["time_ns"]),
            pct(r["share"]),
            ", ".join(f"{_COPY_WORDS.get(k, k)} {ms(v)}" for k, v in r["regions_ns"].items()),
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


def _softmax_rows(answer: dict[str, Any], where: str) -> list[list[str]]:
    """The table's rows: the attention source's time (whole ranges, and their matmul
    kernels alone) and FLOPs, then the kernel rows'."""
    attention, category = answer["attention"], answer["by_kernel_category"]
    t = attention["time"]
    whole = " (whole ranges: every operation in them)" if t.get("whole_ranges") else ""
    rows = [[f"time, {where}{whole}", ms(t["softmax_ns"]), ms(t["matmul_ns"]), ratio(t["ratio"])]]
    if t.get("whole_ranges"):
        kernels = ms(t.get("matmul_kernel_ns"))
        said = ratio(t.get("kernel_ratio"))
        rows.append([f"time, {where} (matmul kernels only)", ms(t["softmax_ns"]), kernels, said])
    fl = attention["flops"]
    rows.append(
        [f"FLOPs, {where}", flop(fl["softmax_flop"]), flop(fl["matmul_flop"]), ratio(fl["ratio"])]
    )
    label, ct, cf = "softmax kernels, attention matmul kernels", category["time"], category["flops"]
    rows.append([f"time, {label}", ms(ct["softmax_ns"]), ms(ct["matmul_ns"]), ratio(ct["ratio"])])
    rows.append(
        [f"FLOPs, {label}", flop(cf["softmax_flop"]), flop(cf["matmul_flop"]), ratio(cf["ratio"])]
    )
    return rows


def _softmax_notes(doc: dict[str, Any], answer: dict[str, Any], where: str) -> list[str]:
    """What the rows cover, count and estimate."""
    source = answer["attention_source"]
    lines = [f"{cap(scope_name(doc, 'step'))}; {_ATTENTION_FROM[source]}"]
    covered = attention_coverage(answer)
    if covered:
        lines.append(
            f"The {where} hold work of {covered} only, so the two rows of the {where} cover it; "
            f"the kernel rows cover all of the {scope_name(doc, 'step')}."
        )
    if answer["attention"]["time"].get("whole_ranges"):
        lines.append(
            "The attention matmul ranges' whole time counts every operation launched in them "
            "(scaling, copies, reshapes); the matmul kernels only row counts their matmul "
            "kernels alone."
        )
    lines.append(
        "Kernel rows: kernels of category `softmax` against the matmul kernels of the "
        f"attention {'modules' if source == 'modules' else 'matmul ranges'}."
    )
    blocks = (("attention", answer["attention"]), ("softmax kernel", answer["by_kernel_category"]))
    for label, block in blocks:
        said = per_element_text(block["flops"].get("per_element"))
        if said:
            lines.append(f"Softmax FLOPs ({label} rows) are estimates: {said}.")
    return lines


def softmax_section(doc: dict[str, Any]) -> list[str]:
    """Softmax against the attention matmuls: the source's rows, then the kernel rows."""
    answer = doc["answers"]["softmax_vs_matmul"]
    source = answer["attention_source"]
    where = {"ranges": "attention ranges", "modules": "attention modules"}.get(source, "attention")
    lines = ["## Softmax versus the attention matmuls", "", *_softmax_notes(doc, answer, where)]
    lines += [
        "",
        *table(["", "softmax", "matmul", "softmax / matmul"], _softmax_rows(answer, where)),
    ]
    blocks = (answer["attention"], answer["by_kernel_category"])
    reasons = sorted(
        {
            str(e["unknown"])
            for b in blocks
            for e in b.values()
            if isinstance(e, dict) and e.get("unknown")
        }
    )
    return [*lines, f"Unknown where marked –: {'; '.join(reasons)}.", ""] if reasons else lines
