"""The hostile-names corpus (tests/hostile_names.py) in a real headless Chromium.

The HTML report of the hostile export and trace, the `nsysmap diff --html`
page, and report.md rendered by markdown-it (CommonMark with raw HTML on, as
by default, and GFM tables) are opened offline. In none does a script the
names carry run (`window.pwned` stays unset), nor a link into `pwned.invalid`
appear (Plotly draws `<a href>` in legends and labels as SVG links), nor
text grow to the 300px a name's style asks for; every chart is drawn, and
the names are on the page as text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from devtools.browser import Chromium, find_chromium
from tests.hostile_names import Outputs, hostile_outputs

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        find_chromium() is None,
        reason="no Chromium on PATH: run `make chromium` (apt-get install chromium) as root",
    ),
]
# What the names may have done to the page, and whether they are on it as text.
PROBE = """(() => {
  const href = a => a.getAttribute("href") || a.getAttribute("xlink:href") ||
    a.getAttributeNS("http://www.w3.org/1999/xlink", "href") || "";
  const scripts = [...document.querySelectorAll("script")].filter(
    s => !s.type || s.type === "text/javascript");
  return JSON.stringify({
    pwned: window.pwned === undefined ? null : String(window.pwned),
    links: [...document.querySelectorAll("a")].map(href).filter(h => !h.startsWith("#")),
    styled: [...document.querySelectorAll("[style]")].filter(
      e => e.getAttribute("style").includes("300px")).length,
    huge: [...document.querySelectorAll("body *")].filter(
      e => parseFloat(getComputedStyle(e).fontSize) >= 100).length,
    images: document.querySelectorAll("img, image").length,
    scripts: scripts.filter(s => s.textContent.includes("pwned")).length,
    shown: document.body.textContent.includes("<svg onload="),
    drawn: [...document.querySelectorAll(".main-svg text")].some(
      t => t.textContent.includes("onload=")),
  });
})()"""
CLEAN = {"pwned": None, "links": [], "styled": 0, "huge": 0, "images": 0, "scripts": 0}


@pytest.fixture(scope="module")
def browser():
    with Chromium() as chromium:
        yield chromium


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Outputs:
    return hostile_outputs(tmp_path_factory.mktemp("hostile"))


def markdown_page(report_md: Path) -> Path:
    """report.md as a browser shows it once a CommonMark renderer has made it HTML."""
    body = MarkdownIt("commonmark").enable("table").render(report_md.read_text())
    page = report_md.with_suffix(".md.html")
    page.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>{body}')
    return page


@pytest.mark.parametrize("page", ["A/report.html", "T/report.html", "diff.html"])
def test_html_pages_draw_hostile_names_as_text(browser, outputs, page):
    result = browser.open(outputs.root / page, probe=PROBE)
    found = json.loads(result.probe)
    assert {key: found[key] for key in CLEAN} == CLEAN
    assert found["shown"] and found["drawn"]
    assert result.errors == [] and result.requests == []
    assert result.charts and result.empty == []


@pytest.mark.parametrize("run", ["A", "T"])
def test_report_markdown_rendered_runs_nothing(browser, outputs, run):
    result = browser.open(markdown_page(outputs.root / run / "report.md"), probe=PROBE)
    found = json.loads(result.probe)
    assert {key: found[key] for key in CLEAN} == CLEAN
    assert found["shown"]
    assert result.errors == [] and result.requests == []
