"""The page's own style and script, inlined into every HTML file (Plotly's bundle is read
from the installed `plotly` package by nsysmap.report.html.page)."""

from __future__ import annotations

STYLE = """
:root { --ink: #1d2330; --muted: #5b6474; --line: #e3e6eb; --accent: #1f77b4; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
       color: var(--ink); background: #f7f8fa; }
header { background: #fff; border-bottom: 1px solid var(--line); padding: 18px 28px 10px; }
header h1 { margin: 0 0 6px; font-size: 22px; }
header ul.facts { margin: 0; padding: 0; list-style: none; color: var(--muted); }
header ul.facts li { display: inline-block; margin-right: 18px; }
main { max-width: 1280px; margin: 0 auto; padding: 18px 28px 40px; }
nav { margin: 6px 0 14px; }
nav a { margin-right: 14px; color: var(--accent); text-decoration: none; font-size: 13px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 6px;
          padding: 14px 18px; margin-bottom: 18px; }
section h2 { margin: 0 0 4px; font-size: 17px; }
p.caption { margin: 0 0 8px; color: var(--muted); }
section.limits { border-left: 4px solid #d62728; }
section.limits ul { margin: 6px 0 0; }
.chart { width: 100%; min-height: 380px; }
details { margin-top: 8px; }
summary { cursor: pointer; color: var(--accent); }
table.sortable { border-collapse: collapse; margin-top: 8px; font-size: 12.5px; width: 100%; }
table.sortable th, table.sortable td { border-bottom: 1px solid var(--line); padding: 3px 8px;
                                        text-align: left; }
table.sortable td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.sortable th { cursor: pointer; background: #f0f2f5; position: sticky; top: 0;
                    user-select: none; white-space: nowrap; }
table.sortable th[aria-sort="ascending"]::after { content: " ▲"; }
table.sortable th[aria-sort="descending"]::after { content: " ▼"; }
.table-wrap { max-height: 420px; overflow: auto; }
td.name { font-family: ui-monospace, Menlo, Consolas, monospace; word-break: break-all; }
footer { color: var(--muted); font-size: 12px; text-align: center; padding: 10px; }
"""

# Draws every chart from its JSON, and sorts tables on a header click
# (numbers by value, text alphabetically; empty cells last).
SCRIPT = """
(function () {
  var config = {responsive: true, displaylogo: false,
                modeBarButtonsToRemove: ["lasso2d", "select2d"]};
  document.querySelectorAll("div.chart[data-figure]").forEach(function (div) {
    var spec = JSON.parse(document.getElementById(div.dataset.figure).textContent);
    Plotly.newPlot(div, spec.data, spec.layout, config).then(function (gd) {
      // a point whose customdata is "#id" takes the page there when clicked
      gd.on("plotly_click", function (event) {
        var link = event.points.length ? event.points[0].customdata : null;
        if (typeof link === "string" && link.charAt(0) === "#") { window.location.hash = link; }
      });
    });
  });
  function key(cell) {
    var v = cell.getAttribute("data-v");
    if (v === null || v === "") { return null; }
    var n = Number(v);
    return cell.classList.contains("num") && !isNaN(n) ? n : v.toLowerCase();
  }
  function sortBy(th) {
    var table = th.closest("table"), body = table.tBodies[0];
    var col = Array.prototype.indexOf.call(th.parentNode.children, th);
    var down = th.getAttribute("aria-sort") !== "descending";
    th.parentNode.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", down ? "descending" : "ascending");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[col]), y = key(b.cells[col]);
      if (x === y) { return 0; }
      if (x === null) { return 1; }
      if (y === null) { return -1; }
      return (x < y ? -1 : 1) * (down ? -1 : 1);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  document.querySelectorAll("table.sortable th").forEach(function (th) {
    th.addEventListener("click", function () { sortBy(th); });
  });
})();
"""
