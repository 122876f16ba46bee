"""One self-contained HTML page from charts: Plotly's bundle, style and script inlined.

The page opens offline: nothing is fetched, every figure's JSON sits in the
page next to its sortable table. `report_page` makes the page of
`nsysmap report --html`, `page` any page of charts (`nsysmap diff --html`).
"""

from __future__ import annotations

import html
import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nsysmap._version import __version__
from nsysmap.core.errors import ToolMissing
from nsysmap.output.placement import write_file
from nsysmap.report.format import devices_text
from nsysmap.report.html.assets import SCRIPT, STYLE
from nsysmap.report.html.chart import Cell, Chart, Table, code_plain, code_spans

if TYPE_CHECKING:
    from nsysmap.report.answers import Findings

REPORT_HTML = "report.html"


@cache
def plotly_js() -> str:
    """plotly.js as shipped inside the `plotly` Python package."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError as exc:
        raise ToolMissing("the HTML report needs the plotly package (pip install plotly)") from exc
    return get_plotlyjs()


def _json(value: object) -> str:
    """JSON safe inside a <script> element."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _cell(value: Cell, kind: str) -> str:
    if value is None:
        return '<td data-v="" class="num">–</td>' if kind != "text" else '<td data-v="">–</td>'
    if kind == "text":
        text = html.escape(str(value))
        key = html.escape(code_plain(str(value)))
        return f'<td data-v="{key}" class="name">{code_spans(text)}</td>'
    if kind == "ms":
        shown = f"{value:,.3f}"
    elif kind == "share":
        shown = f"{100 * value:.1f} %"
    else:
        shown = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.3f}"
    return f'<td data-v="{value!r}" class="num">{shown}</td>'


def table_html(table: Table) -> str:
    """A sortable table; ms columns say so in their header."""
    kinds = table.kinds or ["text"] * len(table.columns)
    head = "".join(
        f"<th>{html.escape(c)}{' (ms)' if k == 'ms' else ''}</th>"
        for c, k in zip(table.columns, kinds, strict=True)
    )
    body = "".join(
        "<tr>" + "".join(_cell(v, k) for v, k in zip(row, kinds, strict=True)) + "</tr>"
        for row in table.rows
    )
    return (
        f'<div class="table-wrap"><table class="sortable"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def chart_html(chart: Chart) -> str:
    """A chart's section: title, caption, the chart's container, its JSON and table."""
    cid = html.escape(chart.id)
    return (
        f'<section class="chart-section" id="sec-{cid}">'
        f"<h2>{html.escape(chart.title)}</h2>"
        f'<p class="caption">{code_spans(html.escape(chart.caption))}</p>'
        f'<div class="chart" id="chart-{cid}" data-figure="fig-{cid}"></div>'
        f'<script type="application/json" id="fig-{cid}">{_json(chart.figure)}</script>'
        f"<details><summary>Table ({len(chart.table.rows)} rows)</summary>"
        f"{table_html(chart.table)}</details></section>"
    )


def page(
    title: str,
    facts: list[str],
    notes: list[str],
    charts: list[Chart],
    notes_title: str = "What this data cannot answer",
    answers: list[str] | None = None,
    structure: list[str] | None = None,
    lead: str = "",
) -> str:
    """The whole page: header facts, `lead` (HTML: what to fix first), the structure, the
    notes, the answers in brief, then each chart."""
    items = "".join(f"<li>{html.escape(x)}</li>" for x in facts)
    brief = ""
    if structure:
        listed = "".join(
            f"<li>{code_spans(html.escape(line[:1].upper() + line[1:]))}</li>" for line in structure
        )
        brief += (
            f'<section class="limits structure"><h2>Structure of the profile</h2>'
            f"<ul>{listed}</ul></section>"
        )
    if answers:
        listed = "".join(f"<li>{code_spans(html.escape(a))}</li>" for a in answers)
        brief += (
            f'<section class="limits answers"><h2>Answers in brief</h2><ul>{listed}</ul></section>'
        )

    limits = ""
    if notes:
        listed = "".join(f"<li>{code_spans(html.escape(n))}</li>" for n in notes)
        limits = (
            f'<section class="limits"><h2>{html.escape(notes_title)}</h2>'
            f"<ul>{listed}</ul></section>"
        )
    nav = "".join(f'<a href="#sec-{html.escape(c.id)}">{html.escape(c.title)}</a>' for c in charts)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style>"
        f"<script>{plotly_js()}</script></head><body>"
        f'<header><h1>{html.escape(title)}</h1><ul class="facts">{items}</ul></header>'
        f"<main>{lead}{limits}{brief}<nav>{nav}</nav>"
        f"{''.join(chart_html(c) for c in charts)}</main>"
        f"<footer>nsysmap {html.escape(__version__)}</footer>"
        f"<script>{SCRIPT}</script></body></html>\n"
    )


def report_facts(f: Findings, c: Findings | None) -> list[str]:
    """The header lines of the report page."""
    devices = devices_text(f.devices)
    facts = [
        f"Run: {f.run.label}",
        f"{f.backend} backend; {devices or 'no device'}",
        f"Steps: {f.steps if f.steps is not None else 'none'} measured",
        f"Forward passes: {f.forward_passes if f.forward_passes is not None else 'none'} measured",
        f.source_note,
    ]
    if c is not None:
        facts.append(f"Compared with: {c.run.label} ({c.kind})")
    return facts


def report_page(f: Findings, c: Findings | None = None) -> str:
    """The HTML of `nsysmap report --html`: the same answers as the Markdown, drawn."""
    from nsysmap.report.brief import brief
    from nsysmap.report.html.charts import missing_charts, report_charts

    notes = [*f.notes, *(f"Compared run: {n}" for n in (c.notes if c else []))]
    notes = merged_notes(notes, missing_charts(f))
    answers = brief(f.answers) if f.answers else None
    structure = (f.answers.get("structure") or {}).get("lines") if f.answers else None
    lead = fix_first_html(f.answers["answers"]["findings"]) if f.answers else ""
    return page(
        "nsysmap report",
        report_facts(f, c),
        notes,
        report_charts(f, c),
        answers=answers,
        structure=structure,
        lead=lead,
    )


def fix_first_html(answer: dict[str, Any]) -> str:
    """The page's first section: the findings' chart (linking to their evidence) and the
    evidence (nsysmap.report.html.fix_first_chart)."""
    from nsysmap.report.html.fix_first_chart import evidence_html, fix_first_chart

    chart = fix_first_chart(answer)
    return (chart_html(chart) if chart is not None else "") + evidence_html(answer)


def merged_notes(notes: list[str], more: list[str]) -> list[str]:
    """`notes` then `more`, a note of `more` on the same subject as one of `notes` (the
    words before ': ', such as 'No step ranges') told in that note, not once more."""
    out = list(notes)
    for note in more:
        subject, _, rest = note.partition(": ")
        same = next((i for i, n in enumerate(out) if rest and n.startswith(subject + ": ")), None)
        if same is None:
            out.append(note)
        else:
            out[same] = out[same].removesuffix(".") + "; " + rest
    return out


def write_page(text: str, target: Path) -> Path:
    """Write a page; returns its path (an OSError becomes OutputFailed, exit 10)."""
    return write_file(target, text)
