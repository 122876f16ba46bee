"""The Markdown of `nsysmap report`: one section per question, the numbers behind each answer."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from nsysmap.report.answers import run_label
from nsysmap.report.block_section import blocks_section
from nsysmap.report.format import devices_text, flop, kernel_names, ms, num, pct, table
from nsysmap.report.inferred_section import inferred_section
from nsysmap.report.scope_tables import SCOPES, scope_label, share, softmax_time
from nsysmap.report.sections import (
    categories_section,
    layers_section,
    phases_section,
    ranges_section,
    shapes_section,
)

if TYPE_CHECKING:
    from nsysmap.report.answers import Findings, ReportOptions


_ATTENTION_FROM = {
    "modules": "attention modules are those whose class name says attention.",
    "ranges": (
        "no attention module, so from the profile's own ranges: time launched inside a\n"
        "range whose name mentions softmax (attention softmax), or matmul or scores (attention\n"
        "matmuls), within a range whose name mentions attention, whatever its kernels."
    ),
    None: "no attention module and no range named for attention: attention rows are 0.",
}


def render(f: Findings, c: Findings | None, options: ReportOptions) -> str:
    """The whole report."""
    parts = [
        _header(f, c),
        _limits(f, c),
        _matmul_share(f, c),
        _top_kernel(f, c),
        _non_matmul(f),
        _softmax(f),
        phases_section(f),
        layers_section(f),
        ranges_section(f),
        blocks_section(f),
        inferred_section(f),
        categories_section(f),
        shapes_section(f, options.show_shapes),
    ]
    return "\n".join(line for part in parts for line in part).rstrip() + "\n"


def _header(f: Findings, c: Findings | None) -> list[str]:
    devices = devices_text(f.devices)
    lines = [
        "# nsysmap report",
        "",
        f"- Run: `{f.run.label}` ({f.backend} backend; {devices or 'no device'})",
        f"- Steps: {_steps(f)}",
        f"- FLOPs: {f.source_note}",
        f"- Peak: {'; '.join(sorted(set(f.devices['peak_note'].drop_nulls().to_list()))) or '–'}",
    ]
    if c is not None:
        lines.append(f"- Compared with: `{c.run.label}` ({c.kind}), steps: {_steps(c)}")
    return [*lines, ""]


def scopes(f: Findings) -> list[str]:
    """The scopes worth showing: forward + backward only when there is a backward phase."""
    backward = (f.run.ops["phase"] == "backward").any()
    return [s for s in SCOPES if backward or s != "forward_backward"]


def _steps(f: Findings) -> str:
    if f.steps is None:
        return "no step ranges"
    fwd = "unknown" if f.forward_passes is None else str(f.forward_passes)
    return f"{f.steps} (counted per device), of which {fwd} with a forward phase"


def _limits(f: Findings, c: Findings | None) -> list[str]:
    notes = [*f.notes, *(f"Compared run: {n}" for n in (c.notes if c else []))]
    if not notes:
        return []
    return ["## What this data cannot answer", "", *(f"- {n}" for n in notes), ""]


def _matmul_share(f: Findings, c: Findings | None) -> list[str]:
    rows, runs = [], [("this run", f)] + ([(run_label(c), c)] if c else [])
    for label, run in runs:
        for scope in scopes(run):
            matmul, total = run.matmul[scope]
            if total:
                rows.append(
                    [
                        label,
                        scope_label(run.run.ops, scope),
                        ms(total),
                        ms(matmul),
                        pct(share(matmul, total)),
                    ]
                )
    lines = ["## Matrix multiplication's share of time", ""]
    lines.append("Matrix multiplication = `gemm` kernels plus fused `attention` kernels.")
    lines.append("")
    step, fwd = f.matmul["step"], f.matmul["forward"]
    where = scope_label(f.run.ops, "step")
    answer = f"In the {where} {pct(share(*step))} of the time is matrix multiplication"
    answer += f"; in the forward phase {pct(share(*fwd))}" if fwd[1] else ""
    if c is not None:
        answer += f"; in the {run_label(c)}'s steps {pct(share(*c.matmul['step']))}"
    return [*lines, answer + ".", "", *table(["run", "scope", "time", "matmul", "share"], rows)]


def _top_kernel(f: Findings, c: Findings | None) -> list[str]:
    lines = ["## Top kernel by cumulative time", ""]
    firsts = pl.concat(
        [
            x.top.filter((pl.col("rank") == 1) & pl.col("scope").is_in(scopes(x)))
            for x in (f, c)
            if x is not None
        ]
    )
    runs = {"main": f} if c is None else {"main": f, "compare": c}
    rows = [
        [
            "this run" if r["run"] == "main" else run_label(runs[r["run"]]),
            scope_label(runs[r["run"]].run.ops, r["scope"]),
            label,
            r["category"] or "–",
            str(r["calls"]),
            num(r["calls_per_pass"]),
            num(r["forward_calls_per_pass"]),
            ms(r["time_ns"]),
            pct(r["time_share"]),
        ]
        for r, label in zip(firsts.iter_rows(named=True), kernel_names(firsts), strict=True)
    ]
    header = ["run", "scope", "kernel", "category", "calls", "calls per pass"]
    header += ["calls per forward pass", "time", "share"]
    lines += table(header, rows)
    lines.append(_same_kernel(f, c))
    lines.append("A pass is one step on one device with operations in the scope; calls per")
    lines.append("forward pass = the kernel's calls in the forward phase / forward passes,")
    lines.append("whatever the scope.")
    return [*lines, ""]


def _same_kernel(f: Findings, c: Findings | None) -> str:
    def top(x: Findings, scope: str) -> str | None:
        hit = x.top.filter((pl.col("scope") == scope) & (pl.col("rank") == 1))
        return None if hit.is_empty() else hit["name"][0]

    fwd, both = top(f, "forward"), top(f, "forward_backward")
    if fwd is None or both is None:
        return "Whether the top kernel changes with backward included: unknown (no phases).\n"
    text = "Same top kernel with backward included: " + ("yes." if fwd == both else "no.")
    if c is not None and top(c, "step") is not None:
        same = top(c, "step") == top(f, "step")
        text += f" Same top kernel in the {run_label(c)}'s steps as in this run's full step: "
        text += "yes." if same else "no."
    return text + "\n"


def _non_matmul(f: Findings) -> list[str]:
    lines = [f"## Non-matmul kernels above 1 % of the {scope_label(f.run.ops, 'step')}'s time", ""]
    if f.non_matmul.is_empty():
        return [*lines, "None.", ""]
    rows = [
        [
            label,
            r["category"] or "–",
            str(r["calls"]),
            ms(r["time_ns"]),
            pct(r["time_share"]),
        ]
        for r, label in zip(
            f.non_matmul.iter_rows(named=True), kernel_names(f.non_matmul), strict=True
        )
    ]
    return lines + table(["kernel", "category", "calls", "time", "share"], rows)


def _softmax(f: Findings) -> list[str]:
    st, sf = f.softmax_time, f.softmax_flop
    per = "" if f.source != "model" else " (per step)"
    rows = []
    where = "attention ranges" if f.attention_source == "ranges" else "attention modules"
    for label, key, den in (
        (where, "attention_softmax", "attention_matmul"),
        ("everywhere", "softmax", "matmul"),
    ):
        soft = softmax_time(st, key)
        ratio = num(share(soft, st[den]), 3) if soft is not None else "– (inside fused kernels)"
        rows.append([f"time, {label}", ms(soft), ms(st[den]), ratio])
    for label, key, den in (
        ("attention modules", "attention_softmax", "attention_matmul"),
        ("everywhere", "softmax", "matmul"),
    ):
        rows.append(
            [f"FLOPs, {label}{per}", flop(sf[key]), flop(sf[den]), num(share(sf[key], sf[den]), 4)]
        )
    lines = ["## Softmax versus the attention matmuls", ""]
    scope = scope_label(f.run.ops, "step").capitalize()
    lines.append(f"{scope}; {_ATTENTION_FROM[f.attention_source]}")
    lines.append("Softmax FLOPs are estimates (5 per element forward, 4 backward).")
    return [*lines, "", *table(["", "softmax", "matmul", "softmax / matmul"], rows)]
