"""What to fix first with hostile names: findings that quote a module, a layer and a GPU whose
names carry markup and control characters show them as data, in the terminal, report.md and
the HTML page (the renderers of nsysmap/core/inert.py; tests/hostile_names.py's corpus)."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from nsysmap.core.inert import visible
from tests.cli_runner import invoke
from tests.findings_plans import K, Plan, export
from tests.hostile_names import MD_TABLE, MD_TICKS, SCRIPT_SVG, TERMINAL
from tests.test_hostile_names import MARKUP_TOKENS, assert_terminal_safe, markdown_tokens

pytestmark = pytest.mark.slow

EW = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>()"
ATTN = (f"blocks.0.{SCRIPT_SVG}{MD_TICKS}", "HostileAttention")
ACT = (f"blocks.0.mlp.{TERMINAL}{MD_TABLE}", "Act")
GPU = (f"GPU {SCRIPT_SVG} {TERMINAL}", (12, 0))  # not in the table of peaks: its name is quoted
STEP = [
    K("ampere_sgemm_128x64_tn", 3.0),
    K("volta_sgemm_64x64_nt", 1.0, module=ATTN),
    K("void softmax_warp_forward<float>()", 1.0, module=ATTN),
    *[K(EW, 0.01, module=ACT, gap=0.01)] * 8,
]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, str]:
    """The planned run attributed (its terminal text) and reported (Markdown and HTML)."""
    root = tmp_path_factory.mktemp("hostile_findings")
    path = export(Plan(STEP, gpu=GPU), root / "run.sqlite")
    code, terminal, _ = invoke(["attribute", str(path), "-o", str(root / "out")])
    assert code == 0
    code, _, _ = invoke(["report", str(root / "out"), "--html", "--quiet"])
    assert code == 0
    return root / "out", terminal


def test_the_findings_quote_the_hostile_names(run):
    table = pl.read_parquet(run[0] / "findings.parquet")
    assert {"fp32_gemm", "unfused_attention", "elementwise_chain"} <= set(table["rule"])
    evidence, needs = " ".join(table["evidence"]), " ".join(table["needs"].drop_nulls())
    # quoted as code spans, their controls written as escapes; the columns keep them exact
    assert SCRIPT_SVG in evidence and f"`GPU {SCRIPT_SVG} {visible(TERMINAL)}`" in needs
    assert "\x1b" not in evidence + needs and ATTN[0].replace("0", "*", 1) in set(table["module"])


def test_the_terminal_shows_their_controls_escaped(run):
    text = run[1][run[1].index("What to fix first") :]
    assert_terminal_safe(text)
    assert visible(TERMINAL)[:20] in text


def test_report_md_holds_no_markup_the_names_made(run):
    text = (run[0] / "report.md").read_text()
    section = text[text.index("## What to fix first") : text.index("## What this data")]
    assert_terminal_safe(section)
    tokens = markdown_tokens(section)
    assert not [t.type for t in tokens if t.type in MARKUP_TOKENS]
    code = [t.content for t in tokens if t.type == "code_inline"]
    assert any(SCRIPT_SVG in c for c in code) and any(visible(TERMINAL) in c for c in code)
    for block in re.findall(r"(?:^\|.*\n)+", section, re.M):  # every row as wide as its header
        cells = [len(re.findall(r"(?<!\\)\|", line)) - 1 for line in block.splitlines()]
        assert cells == [cells[0]] * len(cells), block


def test_the_html_page_shows_the_names_as_text(run):
    page = (run[0] / "report.html").read_text()
    start = page.index('id="sec-fix_first"')
    section = page[start : page.index("What this data cannot answer", start)]
    assert "<svg onload" not in section and "\x1b" not in section
    assert "&lt;svg onload" in section  # the name is there, escaped
