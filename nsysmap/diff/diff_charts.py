"""The charts of `nsysmap diff --html` (pure: a Diff in, Charts out) and its page."""

from __future__ import annotations

import polars as pl

from nsysmap.attribution.module_names import block_index, block_list, with_block
from nsysmap.core.inert import plotly_texts
from nsysmap.diff.compare import Diff
from nsysmap.diff.diff_text import names, summary, unmatched
from nsysmap.report.html.chart import (
    Chart,
    Table,
    bar,
    chart,
    code_plain,
    horizontal,
    ms,
    ratio,
    table,
)
from nsysmap.report.html.names import distinct_labels
from nsysmap.report.html.page import page
from nsysmap.report.html.steps import phase_order

A_COLOUR, B_COLOUR = "#7f9cc0", "#ff7f0e"
UP, DOWN = "#d62728", "#2ca02c"  # slower, faster
TOP = 20
TABLE_ROWS = 500
COLUMNS = (
    ("name", "text"),
    ("match", "text"),
    ("A", "ms"),
    ("B", "ms"),
    ("change", "ms"),
    ("change / A", "number"),
    ("share of total change", "share"),
)


def _table(diff: Diff, level: str) -> Table:
    rows = diff.levels[level].head(TABLE_ROWS)
    shown = names(diff, level, rows)
    if level == "kernel":  # the table has the full names
        shown = [k or s for k, s in zip(rows["key"], shown, strict=True)]
    return table(
        COLUMNS,
        [
            [
                label,
                r["match"],
                ms(r["a_ns_per_step"]),
                ms(r["b_ns_per_step"]),
                ms(r["change_ns_per_step"]),
                ratio(r["change_ratio"]),
                ratio(r["change_share"]),
            ]
            for label, r in zip(shown, rows.iter_rows(named=True), strict=True)
        ],
    )


def side_by_side(diff: Diff, level: str, title: str, caption: str) -> Chart | None:
    """Grouped bars: A and B per row of a level, in ms per step."""
    rows = diff.levels[level].sort("key", nulls_last=True)
    if rows.is_empty():
        return None
    if level == "phase":  # training order
        order = {p: i for i, p in enumerate(phase_order(rows["key"].drop_nulls().to_list()))}
        rows = rows.sort(pl.col("key").replace_strict(order, default=len(order)))
    x = plotly_texts(names(diff, level, rows))
    data = [
        bar("A", x, [ms(v) for v in rows["a_ns_per_step"]], A_COLOUR),
        bar("B", x, [ms(v) for v in rows["b_ns_per_step"]], B_COLOUR),
    ]
    return chart(
        f"diff_{level}",
        title,
        caption,
        heading=title,
        data=data,
        rows=_table(diff, level),
        barmode="group",
        yaxis={"title": "ms per step"},
    )


def changes(diff: Diff, level: str, title: str, caption: str) -> Chart | None:
    """Horizontal bars: the rows with the largest change, slower in red, faster in green."""
    rows = diff.levels[level].filter(pl.col("change_ns_per_step") != 0).head(TOP)
    if rows.is_empty():
        return None
    labels = plotly_texts(distinct_labels(names(diff, level, rows), 60))
    values = [ms(v) for v in rows["change_ns_per_step"]]
    trace = bar("change", values[::-1], labels[::-1], None, orientation="h")
    signs = rows["change_ns_per_step"].to_list()[::-1]
    trace["marker"] = {"color": [UP if v > 0 else DOWN for v in signs]}
    return chart(
        f"diff_{level}_change",
        title,
        caption,
        heading=title,
        data=[trace],
        rows=_table(diff, level),
        xaxis={"title": "change, ms per step (B − A)"},
        **horizontal(len(labels), 300, 26),
        showlegend=False,
    )


def blocks_chart(diff: Diff) -> Chart | None:
    """Layer by layer: each numbered block (with its modules) in A and B."""
    rows = with_block(diff.levels["module"].rename({"key": "module"}))
    rows = rows.filter(pl.col("block").is_not_null())
    if rows.is_empty():
        return None
    sums = rows.group_by("block").agg(
        pl.col("a_ns_per_step", "b_ns_per_step", "change_ns_per_step").sum()
    )
    sums = sums.with_columns(
        _list=block_list(pl.col("block")), _index=block_index(pl.col("block"))
    ).sort("_list", "_index")
    x = plotly_texts(sums["block"])
    data = [
        bar("A", x, [ms(v) for v in sums["a_ns_per_step"]], A_COLOUR),
        bar("B", x, [ms(v) for v in sums["b_ns_per_step"]], B_COLOUR),
    ]
    rows_table = table(
        [("block", "text"), ("A", "ms"), ("B", "ms"), ("change", "ms")],
        [
            [
                r["block"],
                ms(r["a_ns_per_step"]),
                ms(r["b_ns_per_step"]),
                ms(r["change_ns_per_step"]),
            ]
            for r in sums.iter_rows(named=True)
        ],
    )
    return chart(
        "diff_blocks",
        "Layer by layer: each block in A and B",
        "Each block with its modules.",
        heading="Per block",
        data=data,
        rows=rows_table,
        barmode="group",
        yaxis={"title": "ms per step"},
    )


def diff_charts(diff: Diff) -> list[Chart]:
    """Every chart of the diff page, in order."""
    charts = [
        side_by_side(diff, "phase", "Time per phase", "Operations inside steps, per step."),
        blocks_chart(diff),
        changes(diff, "module", "Modules that changed most", "Own time of each module."),
        side_by_side(diff, "category", "Time per kernel category", "Per step."),
        changes(diff, "kernel", "Kernels that changed most", "Matched by full name."),
    ]
    return [c for c in charts if c is not None]


def diff_page(diff: Diff) -> str:
    """The HTML of `nsysmap diff --html`."""
    facts = [
        f"{x}: {s.label} ({code_plain(s.scope)}, {s.per_step_ns / 1e6:,.3f} ms per step)"
        for x, s in (("A", diff.a), ("B", diff.b))
    ]
    facts.append(summary(diff))
    notes = list(diff.notes)
    for level in diff.levels:
        for run, found in zip(("A", "B"), unmatched(diff, level), strict=True):
            if found:
                shown = ", ".join(found[:20]) + (
                    f" and {len(found) - 20} more" if len(found) > 20 else ""
                )
                notes.append(f"{level} only in {run}: {shown}")
    if diff.a.steps is None or diff.b.steps is None:
        notes.append(
            "A run without steps is compared as one step: its measured region (its whole "
            "capture where no structure says otherwise)."
        )
    return page("nsysmap diff", facts, notes, diff_charts(diff), "Found in one run only")
