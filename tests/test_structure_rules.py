"""The user's rules and the structure model: rules win, and one that makes an answer worse
than without it is said (nsysmap.structure, nsysmap.report.passes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from devtools.synth.bench_shapes import SETUP_WARMUP_TIMED, WARMUP_STEPS_THEN_FORWARD, Spec, build
from nsysmap.attribution.rules import BadNameRule, user_rules
from nsysmap.flow.verbs import analyse, load_profile
from nsysmap.report.build import build_report
from nsysmap.structure.regions import measure_rules
from tests.cli_runner import nsysmap_cli
from tests.runs import run_data


def _answers(path: Path, steps=(), phases=(), measure=()) -> dict[str, Any]:
    analysis = analyse(load_profile(path), rules=user_rules(steps, phases), measure=tuple(measure))
    run = run_data(analysis, waits=True)
    return build_report(run).answers


@pytest.fixture(scope="module")
def shape_one(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("shape") / "one.sqlite"
    build(Spec(SETUP_WARMUP_TIMED, layers=3, passes=3, warmup=1), path)
    return path


@pytest.mark.slow
def test_a_forward_rule_around_the_timed_loop_counts_its_three_passes(shape_one):
    """`--phase 'forward=^timed_iterations$'` names a range that holds three passes: each is
    a forward pass (225 calls per pass, not 675), and the report says the range holds three."""
    plain = _answers(shape_one)
    ruled = _answers(shape_one, phases=["forward=^timed_iterations$"])
    for doc in (plain, ruled):
        top = doc["answers"]["top_kernel"]
        assert top["forward_passes"] == 3
        forward = top["scopes"]["forward"]
        assert forward["calls_per_forward_pass"] * 3 == forward["forward_calls"]
    assert (
        ruled["answers"]["top_kernel"]["scopes"]["forward"]["calls_per_forward_pass"]
        == plain["answers"]["top_kernel"]["scopes"]["forward"]["calls_per_forward_pass"]
    )
    notes = ruled["structure"]["notes"]
    assert notes == [
        "The range `timed_iterations` gives a direction but holds 3 passes of the kernel "
        "sequence: each counts as one pass."
    ]


@pytest.mark.slow
def test_a_measure_rule_wins_and_one_that_names_nothing_is_said(shape_one):
    warm = _answers(shape_one, measure=["^warm_up$"])
    assert warm["run"]["forward_passes"] == 1
    assert warm["scopes"]["forward"]["label"] == "1 forward pass inside `warm_up`"
    assert warm["structure"]["measured"]["evidence"] == [
        "kernel_sequence",
        "range",
        "repeated_ranges",
        "rule",
    ]
    nothing = _answers(shape_one, measure=["^no such range$"])
    assert nothing["run"]["forward_passes"] == 3
    said = [n for n in nothing["cannot_answer"] if n.startswith("The --measure rule")]
    assert said == [
        "The --measure rule `^no such range$` names no range holding a pass: the measured "
        "region was found without it."
    ]


@pytest.mark.slow
def test_a_step_rule_that_names_only_warm_up_steps_is_said(tmp_path):
    """`--step 'warmup_iter_(\\d+)'` gives steps, all of them warm-up work: the measured
    forward passes stay those of the timed loop, and the report says the steps measure
    nothing."""
    path = tmp_path / "three.sqlite"
    build(Spec(WARMUP_STEPS_THEN_FORWARD, layers=3, passes=4, warmup=3), path)
    doc = _answers(path, steps=[r"warmup_iter_(\d+)"])
    assert doc["run"]["forward_passes"] == 4 and doc["run"]["steps"] is None
    both = doc["scopes"]["forward_backward"]
    assert (
        both["label"] == "3 warm-up steps with forward and backward, the only ones in the capture"
    )
    assert any(
        n.startswith("The --step rule gives 3 steps, all of them warm-up work")
        for n in doc["cannot_answer"]
    )
    # where the GPU waits: over the measured region (the timed loop), not over the
    # warm-up steps' windows; its phases and launch calls over the capture, as said
    waits = doc["answers"]["waits"]
    assert (waits["scope"], waits["cost_scope"]) == ("measured region", "whole capture")


@pytest.mark.slow
def test_a_measure_rule_that_is_no_regex_is_a_usage_error(shape_one, tmp_path):
    with pytest.raises(BadNameRule, match="--measure '\\(': not a valid regular expression"):
        measure_rules(["("])
    argv = ["attribute", str(shape_one), "-o", str(tmp_path / "out"), "--measure", "("]
    assert nsysmap_cli(argv) == 2
    argv[-1] = "^timed_iterations$"
    assert nsysmap_cli([*argv, "--quiet"]) == 0
    manifest = (tmp_path / "out" / "manifest.json").read_text()
    assert (
        '"measure_rules": [\n   "^timed_iterations$"' in manifest
        or "^timed_iterations$" in manifest
    )
    table = pl.read_parquet(tmp_path / "out" / "structure.parquet")
    measured = table.filter((pl.col("kind") == "region") & (pl.col("region") == "measured"))
    assert measured["evidence"].to_list() == ["kernel_sequence, range, repeated_ranges, rule"]
