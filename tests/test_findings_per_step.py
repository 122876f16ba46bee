"""A finding says "per step" only where steps are measured.

Without step ranges the measured work (a phase's operations, else the
structure's measured region, else the whole capture) counts as one: a
finding's times are totals over it and its shares are of the measured wall time,
in findings.parquet (`per_step` false), its evidence, the terminal summary,
report.md and the HTML page. With steps, every figure stays per step.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from nsysmap.cli import cli
from nsysmap.core.findings_schema import saving_words
from nsysmap.core.schemas import empty
from nsysmap.core.wait_schemas import IDLE, LAUNCH_COST
from nsysmap.diff.fix_check import check, check_lines
from nsysmap.findings.inputs import PHASES, STEPS, Inputs
from nsysmap.report.build import build_report
from nsysmap.report.fix_first import saving_columns
from nsysmap.report.html.fix_first_chart import evidence_html, fix_first_chart
from nsysmap.report.report_files import read_run
from nsysmap.summaries.fix_first_text import findings_lines
from tests.findings_plans import K, Plan
from tests.test_findings_report import A100_RUN, EW, GEMM, attributed

pytestmark = pytest.mark.slow  # whole flows on synthetic exports

STEP_WORDS = ("per step", "of the step", "the whole step", "one step")
# A step with a backward pass: a range around it holds a forward and a backward pass.
TRAIN_RUN = [*A100_RUN, K(GEMM, 2.0, phase="backward"), *[K(EW, 0.01, phase="backward")] * 10]
PLANS = {
    "steps": Plan(A100_RUN),
    "phases": Plan(A100_RUN, step_ranges=False),
    "capture": Plan(A100_RUN, ranged=False),
    "structure": Plan(TRAIN_RUN, steps=4, step_ranges=False, around="train_batch"),
    "train_steps": Plan(TRAIN_RUN, steps=4),
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
        prose = ("title", "evidence", "place", "evidence_rows", "needs", "fix")
        said = " ".join(row[c] or "" for c in prose)
        assert not any(words in said for words in (*STEP_WORDS, "the step")), said
    gemm = table.filter(pl.col("rule") == "fp32_gemm")["evidence"][0]
    assert "of the measured wall time" in gemm
    titles = dict(table.select("rule", "title").iter_rows())
    assert titles["host_sync"] == "The host synchronises with the GPU inside the measured work"
    assert (
        titles["sync_copy"] == "Synchronous or pageable host-to-device copies in the measured work"
    )
    sync_fix = table.filter(rule="host_sync")["fix"][0]
    assert "cudaMemcpyAsync" in sync_fix and "steps" not in sync_fix


def test_with_steps_every_finding_is_per_step(outputs):
    table = _findings(outputs["steps"])
    assert table["per_step"].to_list() == [True] * table.height
    titles = dict(table.select("rule", "title").iter_rows())
    assert titles["host_sync"] == "The host synchronises with the GPU inside the step"
    assert titles["sync_copy"] == "Synchronous or pageable host-to-device copies in the step"
    assert "when training, log the loss every N steps" in table.filter(rule="host_sync")["fix"][0]
    assert (table["steps"] == 3).all()
    gemm = table.filter(pl.col("rule") == "fp32_gemm")["evidence"][0]
    assert "fp32 GEMM kernels per step" in gemm and "of the step" in gemm


def test_steps_the_structure_finds_without_step_ranges_are_the_findings_steps(outputs):
    """No step range, but a range around each step holding a forward and a backward pass:
    the structure's measured steps are the steps the findings divide by, as the report's
    step scope has them; each step's time its wall time and the gap before the next."""
    out = outputs["structure"]
    ops = pl.read_parquet(out / "ops.parquet")
    assert ops["step"].is_null().all() and ops["phase"].is_not_null().all()
    structure = pl.read_parquet(out / "structure.parquet")
    steps = structure.filter(kind="step", region="measured").sort("index")
    assert steps.height == 4 and (steps["name"] == "train_batch").all()
    walls = (steps["gpu_end_ns"] - steps["gpu_start_ns"]).to_list()
    gaps = [b - a for a, b in zip(steps["gpu_end_ns"], steps["gpu_start_ns"][1:], strict=False)]
    table = _findings(out)
    assert table["per_step"].to_list() == [True] * table.height
    assert (table["steps"] == 4).all()
    assert (table["step_ns"] == round((sum(walls) + sum(gaps)) / 4)).all()
    gemm = table.filter(pl.col("rule") == "fp32_gemm")
    assert "fp32 GEMM kernels per step" in gemm["evidence"][0]
    per_step_gemm = ops.filter(pl.col("name") == GEMM)["dur_ns"].sum() / 4
    assert f"{per_step_gemm / 1e6:,.3f} ms per step" in gemm["evidence"][0]
    lines = findings_lines(table)
    assert "estimated saving per step" in lines and "of the step)" in lines
    # The same run with step ranges: the same findings, figures and words, but for the
    # range the gaps follow and where the steps' spans are.
    labelled = _findings(outputs["train_steps"])
    words = ["evidence", "evidence_rows"]
    assert table.height >= 5 and table.drop(words).equals(labelled.drop(words))

    def unquoted(frame: pl.DataFrame) -> pl.Series:  # the names in backquotes left out
        return frame["evidence"].str.replace_all(r"`[^`]*`", "`...`")

    assert unquoted(table).equals(unquoted(labelled))
    assert "`train_batch > " in table.filter(rule="host_sync")["evidence"][0]
    data = table.filter(pl.col("rule") == "data_wait")["evidence_rows"][0]
    assert data.startswith("structure.parquet (kind step: gpu_start_ns, gpu_end_ns)")


def test_the_waits_rows_count_only_where_the_structures_steps_hold_the_labels_work(outputs):
    """The waits tables keep their rows by the labels: with the structure's steps they
    count where those steps hold every operation in a phase; where a step is left out,
    the launches are counted again from the measured operations, their durations unknown."""
    out = outputs["structure"]
    ops = pl.scan_parquet(out / "ops.parquet")
    waits = {n: pl.read_parquet(out / f"{n}.parquet") for n in ("launch_cost", "idle")}
    structure = pl.read_parquet(out / "structure.parquet")
    whole = Inputs(ops, waits["launch_cost"], waits["idle"], structure=structure)
    assert whole.labels == PHASES and whole.basis == STEPS and whole.labels_agree
    assert whole.launch_costs["shorter_than_launch"].is_not_null().all()
    first = (pl.col("kind") == "step") & (pl.col("index") == 0)
    fewer = Inputs(ops, waits["launch_cost"], waits["idle"], structure=structure.filter(~first))
    assert fewer.basis == STEPS and not fewer.labels_agree
    assert fewer.launch_costs["shorter_than_launch"].is_null().all()
    assert fewer.step_count(0) == 3 and whole.step_count(0) == 4
    assert fewer.launch_costs["launches"].sum() * 4 == whole.launch_costs["launches"].sum() * 3


def test_the_structures_steps_stand_only_where_ranges_mark_them_on_every_device(outputs):
    """A second GPU doing the same work, whose regions the structure found but no step: no
    work is left out for want of a step, the phases are measured on both. Steps found in
    the kernel sequence alone are no steps to divide by either."""
    out = outputs["structure"]
    ops = pl.read_parquet(out / "ops.parquet")
    structure = pl.read_parquet(out / "structure.parquet")
    second = ops.with_columns(device_id=pl.lit(1, pl.Int64), op_id=pl.col("op_id") + 10**6)
    both = pl.concat([ops, second])
    regions = structure.filter(kind="region").with_columns(device_id=pl.lit(1, pl.Int64))

    def inputs(ops: pl.DataFrame, structure: pl.DataFrame) -> Inputs:
        return Inputs(ops.lazy(), empty(LAUNCH_COST), empty(IDLE), structure=structure)

    assert inputs(both, structure).basis == PHASES  # device 1 has no structure row at all
    x = inputs(both, pl.concat([structure, regions]))
    assert x.structure_steps is None and x.basis == PHASES
    assert x.measured().collect()["device_id"].value_counts()["count"].to_list() == [ops.height] * 2
    sequence = structure.with_columns(
        evidence=pl.when(kind="step").then(pl.lit("kernel_sequence")).otherwise("evidence")
    )
    assert inputs(ops, sequence).basis == PHASES
    assert inputs(ops, structure).basis == STEPS


@pytest.mark.parametrize("basis", ["phases", "capture"])
def test_without_steps_the_renderers_say_the_measured_time(outputs, basis):
    out = outputs[basis]
    lines = findings_lines(_findings(out))
    assert "estimated saving over the measured time" in lines
    assert "of the measured wall time)" in lines
    assert not any(words in lines for words in STEP_WORDS)
    result = build_report(read_run(out))
    section = result.markdown.split("## What to fix first", 1)[1].split("\n## ", 1)[0]
    assert "Ranked by estimated saving over the measured time" in section
    assert "| saving | of the measured wall time |" in section
    assert not any(words in section for words in STEP_WORDS)
    answer = result.answers["answers"]["findings"]
    chart = fix_first_chart(answer)
    assert chart is not None
    assert chart.figure["layout"]["xaxis"]["title"]["text"] == "saving (ms)"
    assert all(t.endswith("of the measured wall time") for t in chart.figure["data"][0]["text"])
    assert chart.table is not None and "of the measured wall time" in chart.table.columns
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
    assert saving_columns([True, False])[1] == "of the step or measured wall time"
    assert saving_columns([True, None]) == ["saving per step", "of the step"]
    assert saving_columns([False, False]) == ["saving", "of the measured wall time"]


def test_diff_says_the_saving_of_a_run_without_steps_over_the_measured_time(outputs):
    """`nsysmap diff` of a run without steps against itself: its findings' savings are
    not per step, nor is the time they are measured against."""
    run = read_run(outputs["phases"])
    lines = "\n".join(check_lines(check(run, run)))
    assert "still: #1" in lines and "per step" not in lines
    stepped = read_run(outputs["steps"])
    assert "ms per step" in "\n".join(check_lines(check(stepped, stepped)))


def test_diff_divides_by_the_steps_the_report_and_findings_count(outputs):
    """`nsysmap diff` of a run whose steps only the structure finds (a range around each)
    against the same run with step ranges: both are per step of 4 steps, so nothing
    changed, and the header says where each run's steps are; its fix-check divides the
    same way. Counted by labels alone, the first would be one step of 4 steps' time."""
    result = CliRunner().invoke(
        cli, ["diff", str(outputs["structure"]), str(outputs["train_steps"])]
    )
    assert result.exit_code == 0, result.output
    head = result.output.splitlines()
    assert "(4 steps inside `train_batch`)" in head[0] and "(4 steps)" in head[1], head[:2]
    a_ms, b_ms = (float(line.rsplit(": ", 1)[1].split()[0]) for line in head[:2])
    assert a_ms == b_ms > 0, head[:2]
    assert "B takes the same time per step as A" in result.output
    ops = pl.read_parquet(outputs["structure"] / "ops.parquet")
    assert a_ms == pytest.approx(ops["dur_ns"].sum() / 4 / 1e6, abs=1e-3)


def test_a_saving_unknown_lists_what_it_needs_as_needs():
    """rtx5070 (cs336a2): "saving unknown (the fp32 and TF32/bf16 peaks of ...: not in
    nsysmap's table; step ranges (...): without them ...)" read as the reasons the saving is
    unknown; the step ranges are what its figures need, not why. Said as needs, as
    report.md's "Needs:" line says them."""
    needs = "the peaks of `GPU X`: not in nsysmap's table; step ranges (NVTX `step N`)"
    row = {"priority": 1, "title": "fp32 GEMMs", "place": "GPU 0", "fix": "use TF32"}
    row |= {"saving_ns_per_step": None, "needs": needs, "per_step": False}
    table = pl.DataFrame([row])
    line = findings_lines(table).splitlines()[1]
    assert line.endswith(f"(GPU 0): saving unknown; needs: {needs}")
