"""Every renderer against the hostile-names corpus (tests/hostile_names.py).

A synthetic nsys export and a torch.profiler trace whose kernels, ranges,
modules, operators and GPU carry HTML, Plotly markup, Markdown, terminal
controls, JSON-breaking strings, bidi characters and a very long name go
through `nsysmap attribute`, `report --html`, `diff --html` and `export
--perfetto` (the multi-rank text: tests/test_hostile_ranks.py; Chromium:
tests/test_browser_hostile.py). Each output shows the names as data:

* terminal texts hold no control character but the newlines they are made of,
  and no line that a name started;
* report.md, rendered by markdown-it (CommonMark with raw HTML on, and GFM
  tables), has no HTML, link, image, heading or emphasis that a name made;
* answers.json and the Perfetto trace are JSON that hold every name exactly as
  the profile wrote it;
* the HTML pages' Plotly figures carry no tag but their own `<br>`, and the
  pages no name unescaped.

Each check also finds a name where it should be, so none passes on an output
that left the names out.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from markdown_it import MarkdownIt

from nsysmap.core.inert import visible
from tests.cli_runner import invoke
from tests.hostile_names import (
    CONTROLS,
    NAMES,
    SCRIPT_SVG,
    TERMINAL,
    Outputs,
    hostile_outputs,
    hostile_trace,
)

pytestmark = pytest.mark.slow

MARKUP_TOKENS = {"html_block", "html_inline", "link_open", "image"}
# What report.md's own text makes: its headings and emphasis (no name is in them).
OWN_EMPHASIS = {"Inside", "own", "GPU span", "The structure model", "Weak"}
FIGURE = re.compile(r'<script type="application/json" id="fig-[^"]*">(.*?)</script>', re.S)
# Keys of a Plotly trace whose text plotly.js draws (labels, legend, hover).
DRAWN = ("name", "x", "y", "labels", "text", "hovertext", "customdata")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Outputs:
    return hostile_outputs(tmp_path_factory.mktemp("hostile"))


def assert_terminal_safe(text: str) -> None:
    """No control character but newlines; no line begun by a name's newline."""
    assert not set(text) - {"\n"} & CONTROLS
    assert not re.search(r"^# Injected heading|^- item", text, re.M)


TERMINAL_TEXTS = ["attribute_a", "attribute_t", "report_a", "report_t", "diff", "gate"]


@pytest.mark.parametrize("command", TERMINAL_TEXTS)
def test_terminal_texts_show_control_characters_escaped(outputs, command):
    text = outputs.texts[command]
    assert_terminal_safe(text)
    assert visible(TERMINAL)[:20] in text  # the name is there, escaped


def markdown_tokens(text: str) -> list[Any]:
    out = []
    for token in MarkdownIt("commonmark").enable("table").parse(text):
        out += [token, *(token.children or [])]
    return out


@pytest.mark.parametrize("run", ["A", "T"])
def test_report_markdown_holds_no_markup_a_name_made(outputs, run):
    text = (outputs.root / run / "report.md").read_text()
    assert_terminal_safe(text)
    tokens = markdown_tokens(text)
    assert not [t.type for t in tokens if t.type in MARKUP_TOKENS]
    headings = [t for i, t in enumerate(tokens[1:]) if tokens[i].type == "heading_open"]
    assert all("Injected" not in h.content for h in headings)
    emphasised = [
        tokens[i + 1].content for i, t in enumerate(tokens) if t.type in ("em_open", "strong_open")
    ]
    assert set(emphasised) <= OWN_EMPHASIS
    code = [t.content for t in tokens if t.type == "code_inline"]
    assert any(SCRIPT_SVG in c for c in code) and any(visible(TERMINAL) in c for c in code)


@pytest.mark.parametrize("run", ["A", "T"])
def test_report_markdown_tables_keep_their_columns(outputs, run):
    """A name's `|` or newline never adds a cell or a line: every row of a table has as
    many cells as its header, and renders as one row."""
    text = (outputs.root / run / "report.md").read_text()
    blocks = re.findall(r"(?:^\|.*\n)+", text, re.M)
    assert len(blocks) > 5
    for block in blocks:
        lines = block.splitlines()
        cells = [len(re.findall(r"(?<!\\)\|", line)) - 1 for line in lines]
        assert cells == [cells[0]] * len(lines), block
        rendered = MarkdownIt("commonmark").enable("table").render(block)
        assert rendered.count("<tr>") == len(lines) - 1  # the delimiter row is no row


# What JSON must escape in a string: C0 controls (a newline between values is JSON's own).
JSON_ESCAPED = frozenset(chr(c) for c in range(0x20)) - {"\n"}


def test_answers_json_keeps_every_name_as_the_profile_wrote_it(outputs):
    raw = (outputs.root / "A" / "answers.json").read_text()
    assert not set(raw) & JSON_ESCAPED
    strings = set(_strings(json.loads(raw)))
    for key in ("script_svg", "terminal", "json", "bidi", "md_table"):
        assert any(NAMES[key] in s for s in strings), key


def test_perfetto_export_keeps_every_name_as_the_profile_wrote_it(outputs):
    raw = (outputs.root / "A.json").read_text()
    assert not set(raw) & JSON_ESCAPED
    names = {e["name"] for e in json.loads(raw)["traceEvents"]}
    for name in NAMES.values():
        assert f"{name} k" in names


@pytest.mark.parametrize("page", ["A/report.html", "T/report.html", "diff.html"])
def test_html_figures_draw_names_as_text(outputs, page):
    text = (outputs.root / page).read_text()
    figures = [json.loads(f) for f in FIGURE.findall(text)]
    drawn = [s for fig in figures for trace in fig["data"] for s in _drawn(trace)]
    drawn += [s for fig in figures for s in _strings(fig["layout"])]
    tags = {tag for s in drawn for tag in re.findall(r"<[^>]*>", s)} - {"<br>"}
    assert tags == set()
    assert any("&lt;svg onload=" in s for s in drawn)  # the names are drawn, escaped
    page_text = text.replace(_plotly_bundle(text), "")
    assert [key for key, name in NAMES.items() if "<" in name and name in page_text] == []


def _drawn(trace: dict[str, Any]) -> list[str]:
    return [s for key in DRAWN if key in trace for s in _strings(trace[key])]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _plotly_bundle(page: str) -> str:
    start = page.index("<script>") + len("<script>")
    return page[start : page.index("</script>", start)]


def test_an_error_quoting_a_name_shows_its_controls_escaped(tmp_path):
    """A trace refused for a negative duration: the message quotes the file's name and
    the event's, both escaped, on one line."""
    path = tmp_path / f"bad {TERMINAL}.json"
    hostile_trace(path)
    doc = json.loads(path.read_text())
    doc["traceEvents"].append(
        {"ph": "X", "cat": "cpu_op", "name": TERMINAL, "pid": 1, "tid": 1, "ts": 5, "dur": -1}
    )
    path.write_text(json.dumps(doc))
    code, out, err = invoke(["attribute", path, "-o", tmp_path / "out"])
    assert code != 0 and out == ""
    assert_terminal_safe(err)
    assert err.count("\n") == 1 and visible(TERMINAL)[:20] in err
