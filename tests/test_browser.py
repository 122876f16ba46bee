"""The HTML pages in a real headless Chromium, opened from disk with the network blocked.

One Chromium for the whole file (`make test` installs Debian's chromium when
it is missing and it can). Each page: no console error or exception, no
request leaves the machine, every chart container holds a drawn Plotly
figure, the expected number of charts and tables, a screenshot that is not
blank.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.browser import Chromium, find_chromium, png_size
from devtools.synth.bulk import write_export
from devtools.synth.tile import gpt_tables
from nsysmap.diff.compare import compare
from nsysmap.diff.diff_charts import diff_page
from nsysmap.flow.verbs import analyse_file
from nsysmap.report.answers import ReportOptions
from nsysmap.report.build import build_report
from nsysmap.report.html.page import report_page, write_page
from nsysmap.report.report_files import read_run
from tests.samples import analyse_samples

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        find_chromium() is None,
        reason="no Chromium on PATH: run `make chromium` (apt-get install chromium) as root",
    ),
]
# Sorts the top kernels' table by rank twice: first cell and row count after each click.
SORT = """(() => {
  const th = document.querySelector("#sec-top_kernels th");
  const first = () => document.querySelector("#sec-top_kernels tbody tr td").textContent;
  th.click(); const down = first();
  th.click(); const up = first();
  const rows = document.querySelectorAll("#sec-top_kernels tbody tr").length;
  return [down, up, th.getAttribute("aria-sort"), rows];
})()"""


@pytest.fixture(scope="module")
def browser():
    with Chromium() as chromium:
        yield chromium


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pages")
    analyse_samples(root)
    train = build_report(read_run(root / "train"), read_run(root / "infer"))
    analyse_file(write_export(root / "gpt.sqlite", gpt_tables(1500, seed=4)), root / "gpt12")
    gpt = build_report(read_run(root / "gpt12"), options=ReportOptions(dtype="bf16"))
    diff = compare("train", train.findings.run.ops, "infer", train.compare.run.ops)
    return {
        "diff": write_page(diff_page(diff), root / "diff.html"),
        "train": write_page(report_page(train.findings, train.compare), root / "train.html"),
        "gpt12": write_page(report_page(gpt.findings), root / "gpt12.html"),
    }


def assert_clean(result, charts: int) -> None:
    assert result.errors == []
    assert result.requests == []
    assert len(result.charts) == charts
    assert result.empty == []
    assert result.tables == charts
    width, height = png_size(result.screenshot)
    assert width == 1280 and height > 2000
    assert result.colours > 20  # a blank page has one or two


def test_training_report_renders_offline(browser, pages):
    result = browser.open(pages["train"], probe=SORT)
    assert_clean(result, 10)
    assert "chart-communication" in result.drawn  # the sample's NCCL all-reduce
    down, up, order, rows = result.probe
    assert (down, up, order) == (str(rows), "1", "ascending") and rows > 5


def test_twelve_block_report_with_rates_renders_offline(browser, pages):
    result = browser.open(pages["gpt12"])
    assert_clean(result, 11)
    assert "chart-rates" in result.drawn


def test_diff_page_renders_offline(browser, pages):
    result = browser.open(pages["diff"])
    assert_clean(result, 5)


def test_a_page_that_fetches_something_is_caught(browser, tmp_path):
    page = tmp_path / "fetch.html"
    page.write_text(
        '<html><body><div class="chart"></div>'
        '<script src="https://cdn.example.invalid/plotly.js"></script>'
        "<script>undefinedFunction()</script></body></html>"
    )
    result = browser.open(page, draw_s=0.5)
    assert result.requests == ["https://cdn.example.invalid/plotly.js"]
    assert any("undefinedFunction" in e for e in result.errors)
    assert result.empty == result.charts == [""]
