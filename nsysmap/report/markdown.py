"""The Markdown of `nsysmap report`, rendered from answers.json alone.

Every number printed here is a value of the answers document
(nsysmap.report.answer_doc), formatted by nsysmap.report.format; nothing is
computed from the profile in this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nsysmap.core.inert import markdown_code, markdown_text
from nsysmap.report.brief import brief, same_as_forward
from nsysmap.report.communication import communication_section
from nsysmap.report.doc_sections import (
    blocks_section,
    categories_section,
    inferred_section,
    layers_section,
    phases_section,
    ranges_section,
    shapes_section,
)
from nsysmap.report.format import devices_text, flop, kernel, ms, pct, per, ratio, table
from nsysmap.report.questions import present_scopes
from nsysmap.report.softmax_answer import attention_coverage
from nsysmap.report.waits import waits_section

if TYPE_CHECKING:
    from nsysmap.report.answers import Findings

FORWARD_ONLY = "forward-only run"
_ATTENTION_FROM = {
    "modules": "attention modules are those whose class name says attention.",
    "ranges": (
        "no attention module, so from the profile's own ranges: time launched inside a\n"
        "range whose name mentions softmax (attention softmax), or matmul or scores (attention\n"
        "matmuls), within a range named for attention where the profile has one."
    ),
    None: "no attention module and no range named for softmax or the attention matmuls.",
}


def scopes(f: Findings) -> list[str]:
    """The scopes worth showing: forward + backward only when there is backward work."""
    return present_scopes(f.run.ops)


def render(doc: dict[str, Any], show_shapes: bool = False) -> str:
    """The whole report."""
    answers = doc["answers"]
    parts = [
        _header(doc),
        _limits(doc),
        _brief(doc),
        _left_out(doc),
        _matmul_share(doc),
        _top_kernel(doc),
        _non_matmul(doc),
        _softmax(doc),
        communication_section(answers["communication"]),
        waits_section(answers["waits"]),
        phases_section(doc),
        layers_section(doc),
        ranges_section(answers["ranges"]),
        blocks_section(answers["blocks"]),
        inferred_section(answers["inferred_blocks"]),
        categories_section(doc),
        shapes_section(answers["shapes"], show_shapes),
    ]
    return "\n".join(line for part in parts for line in part).rstrip() + "\n"


def compare_label(doc: dict[str, Any]) -> str:
    """The compared run's name in tables: "forward-only run" only when it is one."""
    other = doc.get("compare") or {}
    return FORWARD_ONLY if other.get("kind") == FORWARD_ONLY else "compared run"


def _scope_name(doc: dict[str, Any], scope: str) -> str:
    return str(doc["scopes"].get(scope, {}).get("label", scope))


def _header(doc: dict[str, Any]) -> list[str]:
    run = doc["run"]
    devices = devices_text(run["devices"], markdown_code)
    lines = [
        "# nsysmap report",
        "",
        f"- Run: {markdown_code(run['label'])} ({run['backend']} backend; "
        f"{devices or 'no device'})",
        f"- Steps: {_steps(run)}",
        f"- Forward passes: {_forward_passes(run)}",
        f"- Phases: {_phases(doc)}",
        f"- FLOPs: {markdown_text(run['flop_note'])}",
        f"- Peak: {markdown_text('; '.join(run['peak_notes'])) or '–'}",
    ]
    other = doc.get("compare")
    if other is not None:
        lines.append(
            f"- Compared with: {markdown_code(other['label'])} ({other['kind']}), "
            f"steps: {_steps(other)}"
        )
    return [*lines, ""]


def _phases(doc: dict[str, Any]) -> str:
    """Where the phases come from; without any, what stands for the forward pass."""
    if doc["run"]["phases_source"]:
        return f"from {doc['run']['phases_source']}"
    forward = doc["scopes"].get("forward") or {}
    if not forward.get("ops"):
        return "none: no phase ranges or records"
    return f"none: no phase ranges or records; the forward pass is the {forward['source']}"


def _steps(run: dict[str, Any]) -> str:
    if run["steps"] is None:
        text = "no step ranges"
    else:
        text = f"{run['steps']} measured (counted per device), from {run['steps_source']}"
    run_steps, profiled = run.get("steps_run"), run.get("steps_profiled")
    if isinstance(run_steps, int) and isinstance(profiled, list) and len(profiled) == 2:
        captured = profiled[1] - profiled[0] + 1
        if run_steps > captured:
            text += (
                f"; the script ran {run_steps} steps and `nsysmap run` profiled {captured} of "
                f"them (steps {profiled[0]} to {profiled[1]}): the others, warm-up first, "
                "were not captured"
            )
    if run["warmup_ops"]:
        text += (
            f"; warm-up work left out: {run['warmup_ops']:,} operations, "
            f"{ms(run['warmup_time_ns'])}"
        )
    return text


def _forward_passes(run: dict[str, Any]) -> str:
    if run["forward_passes"] is None:
        return "unknown"
    source = {
        "steps": "one per step and device",
        "forward ranges": "forward range instances",
        "root module calls": "calls of the outermost module",
    }
    return f"{run['forward_passes']} ({source.get(run['forward_passes_source'], '?')})"


def _limits(doc: dict[str, Any]) -> list[str]:
    notes = [*doc["cannot_answer"], *(f"Compared run: {n}" for n in doc["compare_cannot_answer"])]
    if not notes:
        return []
    return ["## What this data cannot answer", "", *(f"- {markdown_text(n)}" for n in notes), ""]


def _brief(doc: dict[str, Any]) -> list[str]:
    lines = [markdown_text(line) for line in brief(doc, markdown_code)]
    return ["## Answers in brief", "", *(f"- {line}" for line in lines), ""] if lines else []


def _left_out(doc: dict[str, Any]) -> list[str]:
    if not doc["left_out"]:
        return []
    step = _scope_name(doc, "step")
    lines = ["## What the answers leave out", ""]
    lines.append(f"The {step} answers are about the steady state; these are not in them:")
    lines.append("")
    rows = [
        [markdown_text(r["what"]), ms(r["time_ns"]), pct(r["share"]), markdown_text(r["why"])]
        for r in doc["left_out"]
    ]
    return [*lines, *table(["left out", "time", "share of all", "why"], rows)]


def _share_cell(entry: dict[str, Any]) -> str:
    if entry.get("share") is not None:
        return pct(entry["share"])
    if "share_at_least" in entry:
        return f"unknown ({pct(entry['share_at_least'])} to {pct(entry['share_at_most'])})"
    return "unknown"


def _matmul_share(doc: dict[str, Any]) -> list[str]:
    answer = doc["answers"]["matmul_share"]
    runs = [("this run", answer["scopes"])]
    if "compare" in answer:
        runs.append((compare_label(doc), answer["compare"]))
    rows = [
        [
            label,
            _scope_name(doc, scope) if label == "this run" else scope_label_of(scope),
            ms(entry.get("time_ns")),
            ms(entry.get("matmul_time_ns")),
            _share_cell(entry),
        ]
        for label, per_scope in runs
        for scope, entry in per_scope.items()
        if entry.get("time_ns")
    ]
    lines = ["## Matrix multiplication's share of time", ""]
    lines.append(f"Matrix multiplication = {answer['definition']}.")
    lines.append("")
    for scope, entry in answer["scopes"].items():
        if not entry.get("time_ns"):
            continue
        where = _scope_name(doc, scope).capitalize()
        if entry["share"] is None:
            lines.append(f"- {where}: unknown, {entry['unknown']}.")
        else:
            lines.append(
                f"- {where}: {pct(entry['share'])} of {ms(entry['time_ns'])} is matrix "
                "multiplication."
            )
    for scope, entry in answer.get("compare", {}).items():
        if entry.get("time_ns"):
            where = f"{compare_label(doc).capitalize()}, {scope_label_of(scope)}"
            lines.append(f"- {where}: {_share_cell(entry)} of {ms(entry['time_ns'])}.")
    lines.append("")
    return [*lines, *table(["run", "scope", "time", "matmul", "share"], rows)]


def scope_label_of(scope: str) -> str:
    return {"forward": "forward pass", "forward_backward": "forward + loss + backward"}.get(
        scope, "full step"
    )


def _top_kernel(doc: dict[str, Any]) -> list[str]:
    answer = doc["answers"]["top_kernel"]
    runs = [("this run", answer["scopes"])]
    if "compare" in answer:
        runs.append((compare_label(doc), answer["compare"]))
    rows = []
    for label, per_scope in runs:
        for scope, e in per_scope.items():
            if e.get("name") is None:
                continue
            name = scope_label_of(scope) if label != "this run" else _scope_name(doc, scope)
            rows.append(
                [
                    label,
                    name,
                    kernel(e["label"], 90),
                    e["category"] or "–",
                    f"{e['calls']:,}",
                    per(e["calls_per_pass"]),
                    per(e["calls_per_forward_pass"]),
                    ms(e["time_ns"]),
                    pct(e["share"]),
                ]
            )
    header = ["run", "scope", "kernel", "category", "calls", "calls per pass"]
    header += ["calls per forward pass", "time", "share"]
    lines = ["## Top kernel by cumulative time", "", *table(header, rows)]
    lines += [line for line in (_top_unknowns(doc, answer), _same_kernel(doc, answer)) if line]
    lines.append("")
    lines.append("A pass is one step on one device with operations in the scope (without")
    lines.append("steps, a forward pass is one forward range); calls per forward pass = the")
    lines.append("kernel's calls in the forward scope / forward passes, whatever the scope.")
    return [*lines, ""]


def _top_unknowns(doc: dict[str, Any], answer: dict[str, Any]) -> str:
    notes = [
        f"Top kernel of the {_scope_name(doc, scope)}: unknown, {e['unknown']}."
        for scope, e in answer["scopes"].items()
        if e.get("unknown") and e.get("name") is not None
    ]
    return " ".join(notes)


def _same_kernel(doc: dict[str, Any], answer: dict[str, Any]) -> str:
    same = answer["same_with_backward"]
    if same is None:
        why = answer["same_with_backward_unknown"]
        text = f"Same top kernel with backward included: unknown ({why})."
    else:
        forward = answer["scopes"]["forward"]["label"]
        both = answer["scopes"]["forward_backward"]["label"]
        text = (
            f"Same top kernel with backward included: {'yes' if same else 'no'} "
            f"(forward: {markdown_code(forward)}; forward + loss + backward: "
            f"{markdown_code(both)})."
        )
    if "same_in_compare" in answer:
        verdict = {True: "yes", False: "no", None: "unknown"}[answer["same_in_compare"]]
        text += f" Same top kernel in the {compare_label(doc)}'s full step: {verdict}."
    return text


def _non_matmul(doc: dict[str, Any]) -> list[str]:
    answer = doc["answers"]["non_matmul_kernels"]
    share = pct(answer["min_share"])
    lines = [f"## Non-matmul kernels above {share} of the time", ""]
    for scope, entry in answer["scopes"].items():
        if scope == "forward_backward":
            continue
        lines += [f"### {_scope_name(doc, scope).capitalize()}", ""]
        if entry.get("unknown"):
            lines += [f"Unknown: {entry['unknown']}.", ""]
            continue
        if same_as_forward(answer["scopes"], scope):
            lines += ["The same as the forward pass's: all of its time is the forward pass.", ""]
            continue
        lines += [
            f"Of {ms(entry['time_ns'])}, {ms(entry['non_matmul_time_ns'])} is not matmul.",
            "",
        ]
        rows = [
            [
                kernel(k["label"], 90),
                k["category"] or "–",
                f"{k['calls']:,}",
                ms(k["time_ns"]),
                pct(k["share"]),
            ]
            for k in entry["kernels"]
        ]
        lines += (
            table(["kernel", "category", "calls", "time", "share"], rows) if rows else ["None.", ""]
        )
        if entry["operators_unknown"]:
            lines += [f"By operator: unknown ({entry['operators_unknown']}).", ""]
        elif entry["operators"]:
            ops = [
                [
                    markdown_code(o["aten_op"]),
                    o["category"] or "–",
                    f"{o['kernels']:,}",
                    f"{o['distinct_kernels']:,}",
                    ms(o["time_ns"]),
                    pct(o["share"]),
                ]
                for o in entry["operators"]
            ]
            lines += ["By the PyTorch operator that launched them:", ""]
            lines += table(
                ["operator", "category", "kernels", "distinct kernels", "time", "share"], ops
            )
    return lines


def _softmax(doc: dict[str, Any]) -> list[str]:
    answer = doc["answers"]["softmax_vs_matmul"]
    source = answer["attention_source"]
    where = {"ranges": "attention ranges", "modules": "attention modules"}.get(source, "attention")
    rows = []
    for label, block in (
        (where, answer["attention"]),
        ("by kernel category", answer["by_kernel_category"]),
    ):
        t, fl = block["time"], block["flops"]
        rows.append([f"time, {label}", ms(t["softmax_ns"]), ms(t["matmul_ns"]), ratio(t["ratio"])])
        softmax_flop, matmul_flop = flop(fl["softmax_flop"]), flop(fl["matmul_flop"])
        rows.append([f"FLOPs, {label}", softmax_flop, matmul_flop, ratio(fl["ratio"])])
    lines = ["## Softmax versus the attention matmuls", ""]
    lines.append(f"{_scope_name(doc, 'step').capitalize()}; {_ATTENTION_FROM[source]}")
    covered = attention_coverage(answer)
    if covered:
        lines.append(
            f"The {where} hold work of {covered} only, so the two rows of the {where} cover it; "
            f"the two kernel-category rows cover all of the {_scope_name(doc, 'step')}."
        )
    lines.append("By kernel category: `softmax` kernels against every matmul kernel.")
    lines.append("Softmax FLOPs are estimates (5 per element forward, 4 backward).")
    lines += ["", *table(["", "softmax", "matmul", "softmax / matmul"], rows)]
    reasons = sorted(
        {
            str(e["unknown"])
            for block in (answer["attention"], answer["by_kernel_category"])
            for e in block.values()
            if e["unknown"]
        }
    )
    return [*lines, f"Unknown where marked –: {'; '.join(reasons)}.", ""] if reasons else lines
