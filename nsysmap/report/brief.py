"""The report's answers in brief: one plain sentence per question, from answers.json alone.

The same sentences open the Markdown (nsysmap.report.markdown) and the HTML
page (nsysmap.report.html.page), so the two never say different things::

    Matrix multiplication: 75.9 % of the forward, 72.4 % of all phases.
    Top kernel of the forward: ampere_sgemm_128x32_tn (31.2 % of its time), 24 calls per
    forward pass; with backward included the top kernel is another: ampere_sgemm_64x32_...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nsysmap.report.format import ms, pct, per, plural, ratio
from nsysmap.report.softmax_answer import attention_coverage
from nsysmap.report.waits_text import waits_lead

# Work left out below this share of all time is in the report's table, not in the brief.
BRIEF_MIN_SHARE = 0.001


def _label(doc: dict[str, Any], scope: str) -> str:
    return str(doc["scopes"].get(scope, {}).get("label", scope))


def brief(doc: dict[str, Any], name: Callable[[str], str] = str) -> list[str]:
    """The sentences, in the order of the questions; `name` shows a name from the profile
    (a kernel, an operator) as the renderer must (nsysmap.core.inert)."""
    answers = doc["answers"]
    lines = [_matmul(doc, answers["matmul_share"]), *_top(doc, answers["top_kernel"], name)]
    lines += [
        _non_matmul(doc, answers["non_matmul_kernels"], name),
        _copies(answers.get("copies"), name),
    ]
    lines.append(_softmax(answers))
    lines.append(_communication(answers["communication"]))
    if answers.get("waits") and answers["waits"]["unknown"] is None:
        lines.append("Where the GPU waits: " + waits_lead(answers["waits"]))
    lines += [
        _left_out(item) for item in doc["left_out"] if (item["share"] or 0) >= BRIEF_MIN_SHARE
    ]
    return [line for line in lines if line]


def _matmul(doc: dict[str, Any], answer: dict[str, Any]) -> str:
    parts = []
    for scope, entry in answer["scopes"].items():
        if not entry.get("time_ns"):
            continue
        share = pct(entry["share"]) if entry["share"] is not None else "unknown"
        parts.append(f"{share} of the {_label(doc, scope)}")
    return f"Matrix multiplication: {', '.join(parts)}." if parts else ""


def _top(doc: dict[str, Any], answer: dict[str, Any], name: Callable[[str], str]) -> list[str]:
    lines = []
    for scope in ("forward", "step"):
        entry = answer["scopes"].get(scope) or {}
        if entry.get("name") is None or same_as_forward(answer["scopes"], scope, "scope_time_ns"):
            continue
        kind = entry.get("kind") or "kernel"
        copy = "" if kind == "kernel" else f", a {kind}, not a kernel"
        text = (
            f"Top kernel of the {_label(doc, scope)}: {name(entry['label'])} "
            f"({pct(entry['share'])} of its time{copy})"
        )
        text += _calls(entry, scope)
        if entry.get("unknown"):
            text += f"; unknown: {entry['unknown']}"
        lines.append(text + ".")
    same = answer["same_with_backward"]
    if same is None:
        lines.append(
            "Same top kernel with backward included: unknown "
            f"({answer['same_with_backward_unknown']})."
        )
    else:
        other = answer["scopes"]["forward_backward"]["label"]
        lines.append(
            f"With backward included (the {_label(doc, 'forward_backward')}) the top kernel is "
            + ("the same." if same else f"another: {name(other)}.")
        )
    return lines


def _calls(entry: dict[str, Any], scope: str) -> str:
    """How often the top kernel runs: per step first in the step scope (where steps are
    counted), then per forward pass (the question's own count)."""
    parts = []
    per_step = entry.get("calls_per_pass") if scope == "step" and entry.get("passes") else None
    if per_step is not None:
        parts.append(f"{_calls_of(per_step)} per step")
    calls = entry.get("calls_per_forward_pass")
    if calls is not None and not entry["forward_calls"]:
        parts.append("not launched in the forward pass")
    elif calls is not None:
        parts.append(
            f"{per(calls)} per forward pass" if parts else f"{_calls_of(calls)} per forward pass"
        )
    return "".join(f", {part}" for part in parts)


def _calls_of(n: float) -> str:
    return f"{per(n)} call{'' if n == 1 else 's'}"


def same_as_forward(scopes: dict[str, Any], scope: str, key: str = "time_ns") -> bool:
    """True when `scope` is not the forward scope but has just its time (`key`): in a
    forward-only profile its answer would only repeat the forward pass's."""
    time = (scopes.get(scope) or {}).get(key)
    return scope != "forward" and bool(time) and time == (scopes.get("forward") or {}).get(key)


def _non_matmul(doc: dict[str, Any], answer: dict[str, Any], name: Callable[[str], str]) -> str:
    scope = "forward" if answer["scopes"].get("forward", {}).get("kernels") else "step"
    entry = answer["scopes"].get(scope) or {}
    if not entry.get("kernels"):
        return ""
    named = entry["operators"][:3] if entry.get("operators") else []
    if named:
        listed = ", ".join(f"{name(o['aten_op'])} {pct(o['share'])}" for o in named)
        return f"Largest non-matmul work in the {_label(doc, scope)}, by operator: {listed}."
    listed = ", ".join(
        f"{name(k['label'])}"
        f"{'' if k['kind'] == 'kernel' else ' (a ' + k['kind'] + ', not a kernel)'} "
        f"{pct(k['share'])}"
        for k in entry["kernels"][:3]
    )
    return f"Largest non-matmul work in the {_label(doc, scope)}: {listed}."


# Where a copy ran, as the sentence says it ("5.479 ms in the measured region").
_WHERE = {
    "setup": "in the set-up",
    "warmup": "in the warm-up",
    "measured": "in the measured region",
    "tail": "in the tail",
    "before_capture": "launched before the capture",
    "outside": "outside the structure's regions",
}


def brief_copies(answer: dict[str, Any], name: Callable[[str], str] = str) -> str:
    """Copies and memsets in one sentence: the largest, and where they ran; `name` shows
    the copy's name as the renderer must (nsysmap.core.inert)."""
    top = answer["rows"][0]
    where = top["regions_ns"]
    if len(where) == 1:
        at = f"all {_WHERE.get(next(iter(where)), 'in the capture')}"
    else:
        at = ", ".join(f"{ms(v)} {_WHERE.get(k, k)}" for k, v in where.items())
    left = answer.get("left_out_ns") or 0
    leaves = f"; {ms(left)} of them is left out of the answers" if left else ""
    return (
        f"{ms(answer['time_ns'])} ({pct(answer['share'])} of all time); the largest, "
        f"{name(top['name'])}, {plural(top['calls'], 'call')}, {ms(top['time_ns'])}, {at}{leaves}."
    )


def _copies(answer: dict[str, Any] | None, name: Callable[[str], str]) -> str:
    if not answer or answer.get("unknown") or not answer.get("rows"):
        return ""
    if (answer["share"] or 0) < BRIEF_MIN_SHARE:
        return ""
    return "Copies and memsets (no kernels): " + brief_copies(answer, name)


def _softmax(answers: dict[str, Any]) -> str:
    answer = answers["softmax_vs_matmul"]
    time, flops = answer["attention"]["time"], answer["attention"]["flops"]
    whole = bool(time.get("whole_ranges"))  # the ranges' time, not their kernels' alone
    if time["unknown"] and flops["unknown"]:
        return f"Softmax against the attention matmuls: unknown ({time['unknown']})."
    if time["unknown"]:
        said = f"time unknown ({time['unknown']})"
    elif whole:
        said = (
            f"the softmax ranges take {ms(time['softmax_ns'])} against "
            f"{ms(time['matmul_ns'])} for the attention matmul ranges "
            f"({ratio(time['ratio'])} times their time; whole ranges, every operation in "
            f"them; their matmul kernels alone {ms(time['matmul_kernel_ns'])}, "
            f"{ratio(time['kernel_ratio'])} times)"
        )
    else:
        said = (
            f"softmax takes {ms(time['softmax_ns'])} against {ms(time['matmul_ns'])} "
            f"for the attention matmuls ({ratio(time['ratio'])} times their time)"
        )
    if flops["unknown"]:
        said += f"; FLOPs unknown ({flops['unknown']})"
    elif flops["ratio"] is not None:
        subject = "softmax" if time["unknown"] or whole else "it"
        said += f"; {subject} does {ratio(flops['ratio'])} times the attention matmuls' FLOPs"
    covered = attention_coverage(answer)
    where = f", in {covered} only (what the attention {answer['attention_source']} hold)"
    where = where if covered else ""
    return f"Softmax{where}: {said}."


def _communication(answer: dict[str, Any]) -> str:
    if answer.get("unknown"):
        return ""
    totals = answer["totals"]
    return (
        f"Communication: {ms(totals['time_ns'])}, of which {ms(totals['exposed_ns'])} "
        "exposed (not hidden behind compute)."
    )


def _left_out(item: dict[str, Any]) -> str:
    return f"Left out of the answers: {item['what']}, {ms(item['time_ns'])} ({item['why']})."
