"""The charts of the HTML report, from the report's answers (`Findings`), pure.

Each function takes what `nsysmap report` computed and returns a `Chart`
(Plotly figure as a dict, and the table behind it), or None when the data
cannot draw it; `report_charts` lists them in page order, and
`missing_charts` says in a sentence why one is not drawn. Time charts show
milliseconds per step (one step on one device) where the run has steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from nsysmap.core.inert import plotly_text, plotly_texts, visible
from nsysmap.report import scope_tables as rt
from nsysmap.report.answers import run_label
from nsysmap.report.format import cap
from nsysmap.report.html.chart import (
    CATEGORY_COLOURS,
    Chart,
    bar,
    chart,
    code_plain,
    horizontal,
    ms,
    ratio,
    shares,
    table,
    time_axis,
)
from nsysmap.report.html.comm_chart import communication_chart
from nsysmap.report.html.layers import (
    blocks_parts_chart,
    blocks_phase_chart,
    per_step,
    rates_chart,
    tree_chart,
)
from nsysmap.report.html.scope_names import scope_name
from nsysmap.report.html.steps import phase_spread_chart, phase_steps_chart
from nsysmap.report.html.waits_chart import waits_chart
from nsysmap.report.kernel_labels import kernel_labels

if TYPE_CHECKING:
    from nsysmap.report.answers import Findings

TOP_KERNELS = 15
# The columns of each chart's table, and how each sorts and shows.
MATMUL_COLUMNS = (
    ("run", "text"),
    ("scope", "text"),
    ("time", "ms"),
    ("matmul", "ms"),
    ("matmul share", "share"),
)
CATEGORY_COLUMNS = (
    ("category", "text"),
    ("ops", "number"),
    ("time", "ms"),
    ("time share", "share"),
    ("FLOP share", "share"),
)
TOP_KERNEL_COLUMNS = (
    ("rank", "number"),
    ("kernel", "text"),
    ("category", "text"),
    ("calls", "number"),
    ("calls per step", "number"),
    ("calls per forward pass", "number"),
    ("time", "ms"),
    ("share", "share"),
)


def matmul_chart(f: Findings, c: Findings | None) -> Chart:
    """Matmul share of time in forward, forward + backward and the full step (and a compare run)."""
    from nsysmap.report.markdown import scopes

    labels, matmul, other, rows = [], [], [], []
    for run, x in (("this run", f), (run_label(c) if c is not None else "", c)):
        if x is None:
            continue
        for scope in scopes(x):
            mm, total = x.matmul[scope]
            if not total:
                continue
            label = scope_name(x, scope) + (
                f" ({run_label(c)})" if c is not None and x is c else ""
            )
            share = mm / total
            labels.append(label)
            matmul.append(round(share, 6))  # ratio(share), never None here
            other.append(ratio(1 - share))
            rows.append([run, scope_name(x, scope), ms(total), ms(mm), ratio(share)])
    text = [f"{100 * s:.1f} %" for s in matmul]
    drawn = plotly_texts(code_plain(label) for label in labels)
    data = [
        bar("matrix multiplication", drawn, matmul, CATEGORY_COLOURS["gemm"], text=text),
        bar("everything else", drawn, other, "#d9d9d9"),
    ]
    return chart(
        "matmul",
        "Matrix multiplication's share of time",
        f"In each scope, matrix multiplication = {rt.MATMUL_DEFINITION}.",
        heading="Matmul share per scope",
        data=data,
        rows=table(MATMUL_COLUMNS, rows),
        **shares("stack", "scope", "the scope's time"),
    )


def categories_chart(f: Findings) -> Chart | None:
    """Kernel categories: share of time next to share of FLOPs."""
    cats = f.categories
    if cats.is_empty():
        return None
    names = [c or "(none)" for c in cats["category"]]
    time = [ratio(v) for v in cats["time_share"]]
    x = plotly_texts(names)
    data = [bar("time share", x, time, "#1f77b4")]
    if f.source is not None:
        data.append(bar("FLOP share", x, [ratio(v) for v in cats["flop_share"]], "#ff7f0e"))
    rows = [
        [n, r["ops"], ms(r["time_ns"]), ratio(r["time_share"]), ratio(r["flop_share"])]
        for n, r in zip(names, cats.iter_rows(named=True), strict=True)
    ]
    caption = f"{cap(scope_name(f, 'step'))}, devices pooled."
    if f.source is None:
        caption += " No FLOPs: time share only."
    return chart(
        "categories",
        "Kernel categories: share of time and of FLOPs",
        caption,
        heading="Kernel categories",
        data=data,
        rows=table(CATEGORY_COLUMNS, rows),
        **shares("group", "kernel category", "time or FLOPs" if f.source else "time"),
    )


def top_kernels_chart(f: Findings) -> Chart | None:
    """The kernels with the most time in the full step, with calls per forward pass and per step."""
    top = rt.top_kernels(f.run.ops, n=TOP_KERNELS).filter(pl.col("scope") == "step")
    if top.is_empty():
        return None
    steps, unit = per_step(f)
    names = [n or s or "?" for n, s in zip(top["name"], top["short_name"], strict=True)]
    labels = plotly_texts(kernel_labels(names))
    colours = [CATEGORY_COLOURS.get(c or "other", "#7f7f7f") for c in top["category"]]
    per = [ms(t / steps) for t in top["time_ns"]]
    hover = _kernel_hover(top, names)
    trace = bar("time", per[::-1], labels[::-1], None, orientation="h", showlegend=False)
    trace.update(marker={"color": colours[::-1]}, hovertext=hover[::-1], hoverinfo="x+text")
    legend = _category_legend([c or "other" for c in top["category"]])
    rows = [
        [
            r["rank"],
            name,
            r["category"],
            r["calls"],
            r["calls_per_pass"],
            r["forward_calls_per_pass"],
            t,
            ratio(r["time_share"]),
        ]
        for r, name, t in zip(top.iter_rows(named=True), names, per, strict=True)
    ]
    return chart(
        "top_kernels",
        "Top kernels by time",
        f"{cap(scope_name(f, 'step'))}; kernels only (copies and memsets apart); bars "
        "coloured by kernel category (legend); names shortened to the kernel and "
        "what tells it apart (hover or the table for the whole name).",
        heading="Top kernels",
        data=[trace, *legend],
        rows=table(TOP_KERNEL_COLUMNS, rows),
        xaxis=time_axis(unit),
        yaxis={"title": {"text": "kernel", "standoff": 12}},
        **horizontal(len(labels), 320, 28),
    )


def _kernel_hover(top: pl.DataFrame, names: list[str]) -> list[str]:
    """Each top kernel's hover text: its whole name, category and calls."""
    return [
        f"{_wrap(n)}<br>{plotly_text(c)} · {calls:g} calls per step · "
        f"{fwd if fwd is not None else '–'} per forward pass"
        for n, c, calls, fwd in zip(
            names,
            top["category"],
            top["calls_per_pass"].fill_null(top["calls"]),
            _fwd(top),
            strict=True,
        )
    ]


def _category_legend(categories: list[str]) -> list[dict[str, object]]:
    """One legend entry per kernel category drawn (traces without bars of their own)."""
    return [
        bar(category, [None], [None], CATEGORY_COLOURS.get(category, "#7f7f7f"), orientation="h")
        | {"showlegend": True, "hoverinfo": "skip"}
        for category in dict.fromkeys(categories)
    ]


def _wrap(text: str, width: int = 100) -> str:
    """A long name in lines of `width` characters, for a hover box."""
    shown = visible(text)  # cut before escaping: never inside an entity
    return "<br>".join(plotly_text(shown[i : i + width]) for i in range(0, len(shown), width))


def _fwd(top: pl.DataFrame) -> list[str | None]:
    return [None if v is None else f"{v:g}" for v in top["forward_calls_per_pass"]]


def report_charts(f: Findings, c: Findings | None = None) -> list[Chart]:
    """Every chart the run's data can draw, in page order."""
    charts = [
        phase_steps_chart(f),
        phase_spread_chart(f),
        blocks_phase_chart(f),
        blocks_parts_chart(f),
        tree_chart(f),
        matmul_chart(f, c),
        categories_chart(f),
        top_kernels_chart(f),
        communication_chart(f.answers["answers"]["communication"]) if f.answers else None,
        rates_chart(f),
        waits_chart(f.answers["answers"]["waits"]) if f.answers else None,
    ]
    return [chart for chart in charts if chart is not None]


def missing_charts(f: Findings) -> list[str]:
    """Why a chart is not drawn, one sentence each."""
    notes = []
    if f.steps is None and f.run.ops["phase"].is_not_null().any():
        notes.append(
            "No steps in the measured region: phases over the whole run, no step-to-step spread."
        )
    elif f.steps is None:
        notes.append(
            "No steps in the measured region: no per-step chart and no step-to-step spread."
        )
    elif f.steps < 2:
        notes.append("One step only: no step-to-step spread.")
    if f.blocks.is_empty():
        notes.append("No numbered modules (blocks such as transformer.h.0): no per-block charts.")
    if f.run.ops["module"].is_null().all() and f.run.ops["range_path"].is_null().all():
        notes.append("No modules and no ranges: no tree of time.")
    return notes  # no FLOPs (hence no rate chart) is already among the report's notes
