"""The HTML report's first section, what to fix first, from the `findings` answer alone (pure).

`fix_first_chart(answer)` draws the ranked findings as bars of estimated
saving per step, the first on top; a click on a bar takes the page to the
finding's evidence below it (`#finding-N`: the bar's `customdata`, which the
page's script follows). `evidence_html(answer)` is that list:
each finding's evidence, estimate, fix, the tables and rows that show it
and its rule's docs. Both read nsysmap.report.fix_first's answer only.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from nsysmap.core.findings_schema import STEPS, basis_of, per_words, saving_words, share_words
from nsysmap.core.inert import plotly_text, visible
from nsysmap.report.fix_first import TITLE, saving_columns, saving_text
from nsysmap.report.html.chart import (
    MAX_BARS,
    Chart,
    Table,
    bar,
    code_plain,
    code_spans,
    layout,
    ms,
    ratio,
)

BAR = "#d62728"
LABEL = 60  # characters of a bar's label


def anchor(row: Mapping[str, Any]) -> str:
    """The id of a finding's evidence on the page."""
    return f"finding-{row['priority']}"


def fix_first_chart(answer: Mapping[str, Any]) -> Chart | None:
    """Bars of estimated saving per step (over the measured time where no finding has
    measured steps), ranked (None without a finding of known saving)."""
    rows = [r for r in answer.get("findings") or [] if r["saving_ns_per_step"] is not None]
    if answer.get("unknown") or not rows:
        return None
    shown = rows[:MAX_BARS][::-1]  # the first finding on top
    labels = [_label(r) for r in shown]
    trace = bar("estimated saving", [ms(r["saving_ns_per_step"]) for r in shown], labels, BAR)
    trace.update(
        orientation="h",
        text=[
            f"{100 * (r['saving_share'] or 0):.1f} % of {share_words(r.get('per_step'))}"
            for r in shown
        ],
        hovertext=[plotly_text(code_plain(r["evidence"])) for r in shown],
        hoverinfo="x+text",
        customdata=[f"#{anchor(r)}" for r in shown],  # a click shows the evidence
    )
    per_steps = [r.get("per_step") for r in rows]
    words = saving_words(per_steps)
    title = words[0].upper() + words[1:]
    caption = (
        f"{title} of each finding, largest first (an upper bound where the rule says so); "
        "click a finding for its evidence and fix. Rules: docs/findings.md."
    )
    unit = "ms per step" if basis_of(per_steps) == STEPS else "ms"
    return Chart(
        "fix_first",
        TITLE,
        caption,
        {
            "data": [trace],
            "layout": layout(
                title,
                xaxis={"title": f"saving ({unit})"},
                yaxis={"title": {"text": "finding", "standoff": 12}},
                height=max(260, 34 * len(shown) + 120),
            ),
        },
        _table(rows, per_steps),
    )


KINDS = ["number", "text", "text", "ms", "share", "text", "text"]


def _table(rows: list[Mapping[str, Any]], per_steps: list[bool | None]) -> Table:
    """The findings behind the chart, every one."""
    cells: list[list[Any]] = [
        [
            r["priority"],
            r["title"],
            r["place"],
            ms(r["saving_ns_per_step"]),
            ratio(r["saving_share"]),
            r["confidence"],
            r["fix"],
        ]
        for r in rows
    ]
    columns = ["#", "finding", "where", *saving_columns(per_steps), "confidence", "fix"]
    return Table(columns, cells, KINDS)


def _label(row: Mapping[str, Any]) -> str:
    """A bar's label: its rank and title, as Plotly shows text (core/inert.py)."""
    text = f"{row['priority']}. {row['title']}"
    return plotly_text(text if len(text) <= LABEL else text[: LABEL - 1] + "…")


def evidence_html(answer: Mapping[str, Any]) -> str:
    """Each finding's evidence, estimate and fix, under the chart; or why there are none."""
    e = _escaped
    if answer.get("unknown"):
        body = f"<p>Unknown: {code_spans(e(answer['unknown']))}.</p>"
    elif not answer.get("findings"):
        body = (
            f"<p>No rule found anything worth fixing (rules: {code_spans(e(answer['rules']))}).</p>"
        )
    else:
        items = "".join(_item(r) for r in answer["findings"])
        body = f'<ol class="findings">{items}</ol>'
    return f'<section class="limits fix-first"><h2>{e(TITLE)}: evidence</h2>{body}</section>'


def _escaped(text: object) -> str:
    """A text of the answer in the page: controls shown as escapes, markup escaped."""
    return html.escape(visible(text))


def _item(r: Mapping[str, Any]) -> str:
    e = _escaped
    parts = [
        f"<b>{e(r['title'])}</b> ({code_spans(e(r['place']))}): {e(saving_text(r))}"
        + per_words(r.get("per_step")),
        f"Evidence: {code_spans(e(r['evidence']))}.",
        f"Estimate: {e(r['estimate'])}."
        + (f" Overlaps {e(r['overlaps'])}." if r["overlaps"] else ""),
        f"Fix: <code>{e(r['fix'])}</code>",
        f"Rows: {code_spans(e(r['evidence_rows']))}. Rule: {e(r['doc'])}",
    ]
    if r["needs"]:
        parts.insert(3, f"Needs: {code_spans(e(r['needs']))}.")
    return f'<li id="{anchor(r)}" value="{r["priority"]}">' + "<br>".join(parts) + "</li>"
