"""A chart of the HTML report: a Plotly figure as plain data and the table behind it.

Figures are dicts in Plotly's JSON format (`data`, `layout`), built by pure
functions from frames; nothing here imports Plotly's Python API. Numbers are
rounded so that the JSON is stable and small: milliseconds to the nanosecond,
shares to 1e-6.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from instrument.phase_vocabulary import HTML_COLOURS

Cell = str | int | float | None

PHASE_COLOURS = {**HTML_COLOURS, "no direction": "#bcbcbc", "(none)": "#d9d9d9"}
CATEGORY_COLOURS = {
    "gemm": "#1f77b4",
    "attention": "#17becf",
    "softmax": "#9467bd",
    "normalization": "#e377c2",
    "elementwise": "#ff7f0e",
    "reduction": "#bcbd22",
    "optimizer": "#2ca02c",
    "memcpy": "#8c564b",
    "memset": "#c49c94",
    "communication": "#d62728",
    "convolution": "#aec7e8",
    "routing": "#98df8a",
    "sort": "#dbdb8d",
    "graph": "#c5b0d5",
    "other": "#7f7f7f",
}
SERIES = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


@dataclass(frozen=True)
class Table:
    """The rows behind a chart; `kinds` says how each column sorts and shows."""

    columns: list[str]
    rows: list[list[Cell]]
    kinds: list[str] = field(default_factory=list)  # "text", "ms", "share", "number"

    def to_dict(self) -> dict[str, Any]:
        return {"columns": self.columns, "kinds": self.kinds, "rows": self.rows}


@dataclass(frozen=True)
class Chart:
    """One chart: an id, a title, what it shows, the figure and its table."""

    id: str
    title: str
    caption: str
    figure: dict[str, Any]
    table: Table

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "caption": self.caption,
            "figure": self.figure,
            "table": self.table.to_dict(),
        }


# A Markdown code span as nsysmap.core.inert.markdown_code writes one: a run of backticks,
# the name (padded with one space where it starts or ends with a backtick), the same run.
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def _unpadded(match: re.Match[str]) -> str:
    name = match.group(2)
    padded = len(name) > 2 and name[0] == name[-1] == " " and name.strip(" ")
    return name[1:-1] if padded else name


def code_spans(escaped: str) -> str:
    """An escaped text's `names` (the texts mark them so for Markdown) as <code>."""
    return _CODE_SPAN.sub(lambda m: f"<code>{_unpadded(m)}</code>", escaped)


def code_plain(text: str) -> str:
    """A text's `names` without their Markdown marks: for Plotly's labels and hover
    texts and for sorting keys, which show text only."""
    return _CODE_SPAN.sub(_unpadded, text)


def ms(ns: float | None) -> float | None:
    """Nanoseconds as milliseconds, to the nanosecond."""
    return None if ns is None else round(ns / 1e6, 6)


def ratio(x: float | None) -> float | None:
    """A share or ratio, to 1e-6."""
    return None if x is None else round(float(x), 6)


AXIS = {"gridcolor": "#e6e8ec", "zerolinecolor": "#c9cdd3", "automargin": True}


def layout(title: str, **extra: Any) -> dict[str, Any]:
    """Plotly layout common to every chart; axis settings are merged with AXIS."""
    base: dict[str, Any] = {
        "title": {"text": title, "x": 0.01, "font": {"size": 15}},
        "margin": {"l": 70, "r": 20, "t": 46, "b": 60},
        "legend": {"orientation": "h", "y": -0.18},
        "hovermode": "closest",
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
        "xaxis": dict(AXIS),
        "yaxis": dict(AXIS),
    }
    for key, value in extra.items():
        base[key] = _axis(value) if key.startswith(("xaxis", "yaxis")) else value
    return base


def _axis(settings: dict[str, Any]) -> dict[str, Any]:
    """AXIS with `settings`; a title given as text becomes `{"text": ...}`, the only
    form plotly.js draws."""
    title = settings.get("title")
    if isinstance(title, str):
        settings = {**settings, "title": {"text": title}}
    return {**AXIS, **settings}


def bar(name: str, x: list[Any], y: list[Any], colour: str | None, **extra: Any) -> dict[str, Any]:
    """A bar trace."""
    trace: dict[str, Any] = {"type": "bar", "name": name, "x": x, "y": y}
    if colour:
        trace["marker"] = {"color": colour}
    return {**trace, **extra}


# At most this many bars (or labels) along one axis; longer lists are cut (`top_rows`,
# `first_rows`) and the table behind the chart keeps every row.
MAX_BARS = 40
TOP_ROWS = 30
# Axis titles: every value axis says its unit, every category axis what it lists.
SHARE_AXIS = {"title": "share of time (%)", "tickformat": ".0%"}


def time_axis(unit: str, **extra: Any) -> dict[str, Any]:
    """A time axis titled with its unit (`ms` or `ms per step`)."""
    return {"title": f"time ({unit})", **extra}


def category_axis(title: str, **extra: Any) -> dict[str, Any]:
    """An axis of names, titled with what they are."""
    return {"title": title, **extra}


def first_rows(n: int, what: str) -> tuple[int, str]:
    """(rows drawn, caption sentence) for a chart of `n` ordered rows (steps, blocks)."""
    if n <= MAX_BARS:
        return n, ""
    return MAX_BARS, f" Drawn: the first {MAX_BARS} of {n} {what}; the table has them all."


def table(columns: Sequence[tuple[str, str]], rows: list[list[Cell]]) -> Table:
    """The table behind a chart: its (column, kind) pairs, then its rows."""
    return Table([name for name, _ in columns], rows, [kind for _, kind in columns])


def chart(
    id: str,
    title: str,
    caption: str,
    *,
    heading: str,
    data: list[dict[str, Any]],
    rows: Table,
    **layout_extra: Any,
) -> Chart:
    """One chart: `data` (its traces) laid out under `heading` (`layout`, with
    `layout_extra`: axes, bar mode, size) and the table behind it. Every chart of
    the HTML report and of `nsysmap diff --html` is made here."""
    figure = {"data": data, "layout": layout(heading, **layout_extra)}
    return Chart(id, title, caption, figure, rows)


def stacked(category: str, unit: str) -> dict[str, Any]:
    """The layout of stacked time bars over a category axis (`chart`'s layout_extra)."""
    return {"barmode": "stack", "xaxis": category_axis(category), "yaxis": time_axis(unit)}


def shares(barmode: str, category: str, of_what: str) -> dict[str, Any]:
    """The layout of share bars over a category axis: `of_what` says of what (%)."""
    yaxis = {**SHARE_AXIS, "title": f"share of {of_what} (%)"}
    return {"barmode": barmode, "xaxis": category_axis(category), "yaxis": yaxis}


def horizontal(labels: int, floor: int, per_label: int) -> dict[str, Any]:
    """The layout of horizontal bars: as tall as `labels` need, names flush left."""
    return {
        "height": max(floor, per_label * labels + 120),
        "margin": {"l": 20, "r": 20, "t": 46, "b": 50},
    }


def markers(name: str, x: list[Any], y: list[Any], colour: str, **extra: Any) -> dict[str, Any]:
    """A trace of markers (no line)."""
    trace = {"type": "scatter", "mode": "markers", "name": name, "x": x, "y": y}
    return {**trace, **extra, "marker": {"color": colour, "size": 9}}


def box(name: str, y: list[Any], colour: str) -> dict[str, Any]:
    """A box plot with every point drawn beside it."""
    trace = {"type": "box", "name": name, "y": y, "boxpoints": "all", "jitter": 0.3}
    return {**trace, "pointpos": 0, "marker": {"color": colour}}


def right_axis(title: str, **extra: Any) -> dict[str, Any]:
    """A second value axis on the right, over the first (`yaxis2`)."""
    return {"title": title, "overlaying": "y", "side": "right", **extra, "showgrid": False}
