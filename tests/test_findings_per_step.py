"""A finding says "per step" only where steps are measured.

Without step ranges the measured work (a phase's operations, else the
structure's measured region, else the whole capture) counts as one: a
finding's times are totals over it and its shares are of the measured time,
in findings.parquet (`per_step` false), its evidence, the terminal summary,
report.md and the HTML page. With steps, every figure stays per step.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from nsysmap.core.findings_schema import saving_words
from nsysmap.diff.fix_check import check, check_lines
from nsysmap.report.build import build_report
from nsysmap.report.fix_first import saving_columns
from nsysmap.report.html.fix_first_chart import evidence_html, fix_first_chart
from nsysmap.report.report_files import read_run
from nsysmap.summaries.fix_first_text import findings_lines
from tests.findings_plans import Plan
from tests.test_findings_report import A100_RUN, attributed

pytestmark = pytest.mark.slow  # whole flows on synthetic exports

STEP_WORDS = ("per step", "of the step", "the whole step", "one step")
PLANS = {
    "steps": Plan(A100_RUN),
    "phases": Plan(A100_RUN, step_ranges=False),
    "capture": Plan(A100_RUN, ranged=False),
}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("per_step")
    return {name: attributed(plan, root, name) for name, plan in PLANS.items()}


def _findings(out: Path) -> pl.DataFrame:
    table = pl.read_parquet(out / "findings.parquet")
    assert table.height >= 2  # fp32 GEMMs and more: the words of several rules are read
    return table


@pytest.mark.parametrize("basis", ["phases", "capture"])
def test_without_steps_no_finding_says_per_step(outputs, basis):
    table = _findings(outputs[basis])
    assert table["per_step"].to_list() == [False] * table.height
    assert table["steps"].to_list() == [1] * table.height
    for row in table.iter_rows(named=True):
        said = " ".join(row[c] or "" for c in ("evidence", "place", "evidence_rows", "needs"))
        assert not any(words in said for words in STEP_WORDS), said
    gemm = table.filter(pl.col("rule") == "fp32_gemm")["evidence"][0]
    assert "of the measured time" in gemm


def test_with_steps_every_finding_is_per_step(outputs):
    table = _findings(outputs["steps"])
    assert table["per_step"].to_list() == [True] * table.height
    assert (table["steps"] == 3).all()
    gemm = table.filter(pl.col("rule") == "fp32_gemm")["evidence"][0]
    assert "fp32 GEMM kernels per step" in gemm and "of the step" in gemm


@pytest.mark.parametrize("basis", ["phases", "capture"])
def test_without_steps_the_renderers_say_the_measured_time(outputs, basis):
    out = outputs[basis]
    lines = findings_lines(_findings(out))
    assert "estimated saving over the measured time" in lines
    assert "of the measured time)" in lines
    assert not any(words in lines for words in STEP_WORDS)
    result = build_report(read_run(out))
    section = result.markdown.split("## What to fix first", 1)[1].split("\n## ", 1)[0]
    assert "Ranked by estimated saving over the measured time" in section
    assert "| saving | of the measured time |" in section
    assert not any(words in section for words in STEP_WORDS)
    answer = result.answers["answers"]["findings"]
    chart = fix_first_chart(answer)
    assert chart is not None
    assert chart.figure["layout"]["xaxis"]["title"]["text"] == "saving (ms)"
    assert all(t.endswith("of the measured time") for t in chart.figure["data"][0]["text"])
    assert chart.table is not None and "of the measured time" in chart.table.columns
    page = evidence_html(answer)
    assert not any(words in page for words in STEP_WORDS)


def test_with_steps_the_renderers_say_per_step(outputs):
    out = outputs["steps"]
    lines = findings_lines(_findings(out))
    assert "estimated saving per step" in lines and "of the step)" in lines
    result = build_report(read_run(out))
    assert "| saving per step | of the step |" in result.markdown
    chart = fix_first_chart(result.answers["answers"]["findings"])
    assert (
        chart is not None
        and chart.figure["layout"]["xaxis"]["title"]["text"] == "saving (ms per step)"
    )


def test_an_output_before_the_column_reads_as_per_step(outputs, tmp_path):
    """findings.parquet of output schema 1.12 has no `per_step`: its findings said per
    step, and the report reads them so."""
    import shutil

    earlier = tmp_path / "earlier"
    shutil.copytree(outputs["steps"], earlier)
    table = pl.read_parquet(earlier / "findings.parquet").drop("per_step")
    table.write_parquet(earlier / "findings.parquet")
    result = build_report(read_run(earlier))
    rows = result.answers["answers"]["findings"]["findings"]
    assert rows and all(r["per_step"] is None for r in rows)
    assert "Ranked by estimated saving per step" in result.markdown
    assert "| saving per step | of the step |" in result.markdown
    lines = findings_lines(table)
    assert "estimated saving per step" in lines and "of the step)" in lines


def test_a_job_with_ranks_with_and_without_steps_says_both():
    """The ranks of a job, some with steps and some without: the headings say which."""
    both = saving_words([True, False])
    assert both.startswith("estimated saving per step") and "measured time" in both
    assert saving_columns([True, False])[1] == "of the step or measured time"
    assert saving_columns([True, None]) == ["saving per step", "of the step"]
    assert saving_columns([False, False]) == ["saving", "of the measured time"]


def test_diff_says_the_saving_of_a_run_without_steps_over_the_measured_time(outputs):
    """`nsysmap diff` of a run without steps against itself: its findings' savings are
    not per step, nor is the time they are measured against."""
    run = read_run(outputs["phases"])
    lines = "\n".join(check_lines(check(run, run)))
    assert "still: #1" in lines and "per step" not in lines
    stepped = read_run(outputs["steps"])
    assert "ms per step" in "\n".join(check_lines(check(stepped, stepped)))
