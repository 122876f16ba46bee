"""The terminal summary, report.md, answers.json and the HTML page give the same passes and
steps: those of the one structure model (structure.parquet), on both samples, the
benchmark-shaped synthetic exports and every profile of the corpus."""

from __future__ import annotations

import html
import re
from pathlib import Path

import polars as pl
import pytest

from devtools.synth.bench_shapes import SHAPES, Spec, build
from nsysmap.core.errors import NoGpuData
from nsysmap.flow.verbs import analyse_file
from nsysmap.report.build import build_report
from nsysmap.report.html.chart import code_spans
from nsysmap.report.html.page import report_page
from nsysmap.report.report_files import read_run
from tests.answers_profiles import SAMPLE_FILES
from tests.corpus import corpus_files, corpus_path, real_profiles
from tests.samples import SAMPLES


def _params() -> list:
    ours = [pytest.param(name, id=name) for name in (*SAMPLE_FILES, *SHAPES)]
    every = dict.fromkeys([*corpus_files(), *real_profiles()])
    return ours + [pytest.param(n, id=n, marks=pytest.mark.corpus) for n in every]


def _path(name: str, tmp: Path) -> Path:
    if name in SAMPLE_FILES:
        return SAMPLES / name
    if name in SHAPES:
        path = tmp / f"{name}.sqlite"
        build(Spec(name, layers=3, passes=3, warmup=2), path)
        return path
    return corpus_path(name)


def _count(text: str, what: str) -> int:
    """The number before `what` ("3 forward", "2 steps?") in a line, 0 without one."""
    found = re.search(rf"(\d[\d,]*) {what}\b", text)
    return int(found.group(1).replace(",", "")) if found else 0


def no_overlaps(structure: pl.DataFrame) -> bool:
    """Rows of one kind (passes: of one direction) never overlap on one device and process,
    so that each operation is in at most one of them."""
    keys = ["device_id", "pid", "kind", "direction"]
    ordered = structure.sort([*keys, "start_ns"], nulls_last=True)
    previous = pl.col("end_ns").shift(1).over(keys)
    return bool(ordered.select((previous.is_null() | (previous < pl.col("start_ns"))).all()).item())


@pytest.mark.slow
@pytest.mark.parametrize("name", _params())
def test_every_renderer_counts_the_same_passes_and_steps(name, tmp_path):
    out = tmp_path / "out"
    try:
        analysis = analyse_file(_path(name, tmp_path), out)
    except NoGpuData:
        pytest.skip(f"{name}: no GPU activity (nsysmap attribute exits 5)")
    structure = pl.read_parquet(out / "structure.parquet")
    assert no_overlaps(structure)
    measured = structure.filter(pl.col("region") == "measured")
    passes = measured.filter((pl.col("kind") == "pass") & (pl.col("direction") == "forward"))
    steps = measured.filter(pl.col("kind") == "step").height
    result = build_report(read_run(out))
    answers, markdown = result.answers, result.markdown
    # answers.json
    counted = answers["structure"]["measured"]
    assert (counted["forward_passes"], counted["steps"]) == (passes.height, steps)
    assert answers["run"]["forward_passes"] == (passes.height or None)
    assert answers["run"]["steps"] == (steps or None)
    lines = answers["structure"]["lines"]
    measured_line = lines[0]
    assert measured_line.startswith("measured: ")
    assert _count(measured_line, "forward") == passes.height
    assert _count(measured_line, "steps?") == steps
    # the terminal summary: the same sentences
    terminal = analysis.summary_text
    said = terminal.split("\nStructure: ")[1].split("\n\n")[0].splitlines()
    assert [line.strip() for line in said] == lines
    # report.md: the header and the structure section
    forward = f"{passes.height:,} measured" if passes.height else "none measured"
    assert f"- Forward passes: {forward}" in markdown
    assert f"- Steps: {f'{steps:,} measured' if steps else 'none measured'}" in markdown
    section = markdown.split("## Structure of the profile\n\n")[1].split("\n\n")[0]
    assert [line.removeprefix("- ") for line in section.splitlines()] == [
        line[:1].upper() + line[1:] for line in lines
    ]
    # the HTML page: its facts and its structure section
    page = report_page(result.findings)
    assert f"<li>Forward passes: {passes.height or 'none'} measured</li>" in page
    assert f"<li>Steps: {steps or 'none'} measured</li>" in page
    for line in lines:
        assert code_spans(html.escape(line[:1].upper() + line[1:])) in page
