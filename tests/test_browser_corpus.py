"""The HTML report of every real profile with GPU work, read in Chromium as a person would.

One Chromium for all pages. In each rendered page: every axis of every chart
has a title, and a value axis names its unit; no chart draws more than
about 40 bars (categories along an axis) or tree labels; the tree of time
labels every node with at least 5 % of the time. Profiles that
`nsysmap attribute` refuses (no GPU activity) are left out.
Screenshots of a few land in $NSYSMAP_SHOTS when it is set.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from devtools.browser import Chromium, find_chromium
from nsysmap.core.errors import NoGpuData
from nsysmap.flow.verbs import analyse_file
from nsysmap.report.build import build_report
from nsysmap.report.html.chart import MAX_BARS
from nsysmap.report.html.charts import report_charts
from nsysmap.report.html.page import report_page, write_page
from nsysmap.report.html.tree import SEP
from nsysmap.report.report_files import read_run
from tests.corpus import REAL, corpus_path, real_profiles

pytestmark = [
    pytest.mark.browser,
    pytest.mark.corpus,
    pytest.mark.skipif(
        find_chromium() is None,
        reason="no Chromium on PATH: run `make chromium` (apt-get install chromium) as root",
    ),
    pytest.mark.skipif(not REAL.is_dir(), reason=f"the real profiles are not at {REAL}"),
]
UNITS = ("ms", "%", "TFLOP/s")
SLACK = 5  # "about 40": a few over MAX_BARS (an `other (N)` bar, say)
# Per chart: its axes (title, type), the most categories along one axis, tree labels shown.
PROBE = """(() => JSON.stringify([...document.querySelectorAll("div.chart")].map(div => {
  const full = div._fullLayout, data = div._fullData || [];
  const axes = Object.keys(full).filter(k => /^[xy]axis\\d*$/.test(k) && full[k].visible !== false)
    .filter(k => data.some(t => t.type !== "icicle" && [t.xaxis, t.yaxis].includes(
      k[0] + (k.slice(5) || ""))))
    .map(k => [k, (full[k].title || {}).text || "", full[k].type]);
  const most = Math.max(0, ...axes.filter(a => a[2] === "category").map(a =>
    new Set(data.flatMap(t => (a[0][0] === "x" ? t.x : t.y) || [])).size));
  const labels = [...div.querySelectorAll("g.slice text.slicetext")]
    .filter(t => t.textContent.trim() && t.getBoundingClientRect().width > 0)
    .map(t => t.textContent);
  return {id: div.id, axes, most, labels};
})))()"""


def gpu_profiles() -> list[str]:
    return real_profiles()


@pytest.fixture(scope="module")
def browser():
    with Chromium(timeout_s=60) as chromium:
        yield chromium


def big_nodes(chart) -> list[str]:
    """Labels of the tree's nodes within its drawn depth with at least 5 % of the time."""
    trace = chart.figure["data"][0]
    own = dict(zip(trace["ids"], trace["values"], strict=True))
    total = sum(v or 0 for v in own.values())
    labels = dict(zip(trace["ids"], trace["labels"], strict=True))
    root = trace["ids"][trace["parents"].index("")]
    big = []
    for node in own:
        inclusive = sum(v or 0 for n, v in own.items() if n == node or n.startswith(node + SEP))
        level = node.count(SEP) - root.count(SEP) + 1
        if inclusive >= 0.05 * total and 1 < level <= trace["maxdepth"]:
            big.append(labels[node])
    return big


@pytest.mark.parametrize("name", gpu_profiles())
def test_real_report_reads_well(browser, tmp_path, name):
    path = corpus_path(name)
    try:
        analyse_file(path, tmp_path / "run")
    except NoGpuData:
        pytest.skip(f"{name}: no GPU activity (nsysmap attribute exits 5)")
    result = build_report(read_run(tmp_path / "run"))
    charts = {c.id: c for c in report_charts(result.findings)}
    page = write_page(report_page(result.findings), tmp_path / "report.html")
    seen = browser.open(page, probe=PROBE)
    assert seen.errors == [] and seen.empty == []
    shots = os.environ.get("NSYSMAP_SHOTS")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        (Path(shots) / f"{name.split('.')[0]}.png").write_bytes(seen.screenshot)
    for chart in json.loads(seen.probe):
        where = f"{name}: {chart['id']}"
        for axis, title, kind in chart["axes"]:
            assert title, f"{where}: {axis} has no title"
            if kind != "category":
                assert any(u in title for u in UNITS), f"{where}: {axis} {title!r} has no unit"
        assert chart["most"] <= MAX_BARS + SLACK, f"{where}: {chart['most']} bars"
        assert len(chart["labels"]) <= 60, f"{where}: {len(chart['labels'])} tree labels"
    if "tree" in charts:
        drawn = next(c for c in json.loads(seen.probe) if c["id"] == "chart-tree")["labels"]
        # each box shows its name, then its time (with what lies below it)
        missing = [n for n in big_nodes(charts["tree"]) if not any(d.startswith(n) for d in drawn)]
        assert missing == [], f"{name}: tree nodes over 5 % without a label: {missing}"
        assert all(re.search(r"\d ms", d) for d in drawn), f"{name}: a tree box without its time"
