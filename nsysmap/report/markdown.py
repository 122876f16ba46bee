"""The Markdown of `nsysmap report`, rendered from answers.json alone.

Every number printed here is a value of the answers document
(nsysmap.report.answer_doc), formatted by nsysmap.report.format; nothing is
computed from the profile in this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nsysmap.core.inert import markdown_code, markdown_text
from nsysmap.report.answer_sections import (
    REGION_WORDS,
    copies_section,
    scope_name,
    softmax_section,
    structure_section,
)
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
from nsysmap.report.fix_first import fix_first_section
from nsysmap.report.format import cap, devices_text, kernel, ms, pct, per, table
from nsysmap.report.questions import present_scopes
from nsysmap.report.waits_text import waits_section

if TYPE_CHECKING:
    from nsysmap.report.answers import Findings

FORWARD_ONLY = "forward-only run"


def scopes(f: Findings) -> list[str]:
    """The scopes worth showing: forward + backward only when there is backward work."""
    return present_scopes(f.run.ops)


def render(doc: dict[str, Any], show_shapes: bool = False) -> str:
    """The whole report."""
    answers = doc["answers"]
    parts = [
        _header(doc),
        fix_first_section(answers["findings"]),
        structure_section(doc),
        _limits(doc),
        _brief(doc),
        _left_out(doc),
        _matmul_share(doc),
        _top_kernel(doc),
        copies_section(doc),
        _non_matmul(doc),
        softmax_section(doc),
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


def _header(doc: dict[str, Any]) -> list[str]:
    run = doc["run"]
    devices = devices_text(run["devices"], markdown_code)
    lines = [
        "# nsysmap report",
        "",
        f"- Run: {markdown_code(run['label'])} ({run['backend']} backend; "
        f"{devices or 'no device'})",
        f"- Steps: {_steps(run)}",
        f"- Forward passes: {_forward_passes(doc)}",
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
    return f"none: no phase ranges or records; the passes come from {forward['source']}"


def _steps(run: dict[str, Any]) -> str:
    if run["steps"] is None:
        text = "none measured"
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


def _forward_passes(doc: dict[str, Any]) -> str:
    """The measured forward passes (and those of the other regions), from the structure."""
    run = doc["run"]
    if run["forward_passes"] is None:
        return "none measured"
    text = f"{run['forward_passes']:,} measured"
    others = [
        f"{r['forward_passes']:,} in the {REGION_WORDS[r['region']]}"
        for r in (doc.get("structure") or {}).get("regions", [])
        if r["region"] != "measured" and r["forward_passes"]
    ]
    text += f" ({'; '.join(others)})" if others else ""
    source = run.get("forward_passes_source")
    return text + (f"; from {source}" if source else "")


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
    step = scope_name(doc, "step")
    lines = ["## What the answers leave out", ""]
    lines.append(f"The answers are about the {step}, the steady state; these are not in it:")
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
            scope_name(doc, scope) if label == "this run" else scope_label_of(scope),
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
        where = cap(scope_name(doc, scope))
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
            name = scope_label_of(scope) if label != "this run" else scope_name(doc, scope)
            shown = kernel(e["label"], 90)
            if e.get("unknown"):  # graph replays could hide a larger one: the text says so
                shown = f"unknown (largest seen: {shown})"
            rows.append(
                [
                    label,
                    name,
                    shown,
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
    lines.append("Kernels only (copies and memsets are listed apart). Calls per pass = the")
    lines.append("kernel's calls in the scope / the scope's steps (one per step and device);")
    lines.append("calls per forward pass = its calls in the measured forward passes / their")
    lines.append("number (the structure's passes), whatever the scope.")
    return [*lines, ""]


def _top_unknowns(doc: dict[str, Any], answer: dict[str, Any]) -> str:
    notes = [
        f"Top kernel of the {scope_name(doc, scope)}: unknown, {e['unknown']}."
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
        lines += [f"### {cap(scope_name(doc, scope))}", ""]
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
