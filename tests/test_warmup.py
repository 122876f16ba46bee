"""Warm-up work: a mark beside step and phase, and user rules that win over the built-in ones.

A benchmark that warms up with real training steps (`Warm-up Step N > Forward`,
`> Backward`) before the measured ones (`Step N > Forward`, `> Backward`):
the warm-up steps' operations keep phases forward and backward and are marked
`warmup`, so that forward passes can be counted over the measured steps.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from devtools.synth import SynthExport
from nsysmap.attribution.attribute import attribute
from nsysmap.attribution.labels import name_labels
from nsysmap.cli import cli
from nsysmap.flow.verbs import load_profile
from nsysmap.report.report_files import read_run
from nsysmap.report.scope_tables import passes, scope_filter
from tests.corpus import connect, corpus_path

PID, MAIN, AUTOGRAD, DEVICE, STREAM = 1, 1, 2, 0, 7
WARM_STEPS, STEPS = 2, 3
STEP_MS, PHASE_MS = 20, 10


def _benchmark_export(path: Path, warm_steps: int = WARM_STEPS) -> list[dict]:
    """Two warm-up steps (`warm_steps`), then three measured ones; one forward kernel
    launched from the main thread and one backward kernel from the autograd thread per
    step, each 2 ms.

        main      |-- Warm-up Step 0 --|-- Warm-up Step 1 --|-- Step 0 --| ...
                  |-Forward-|-Backward-|-Forward-|-Backward-|
        autograd                 ^k                   ^k

    Returns what each kernel was launched inside, in launch order.
    """
    b = SynthExport()
    b.thread(PID, MAIN, "python")
    b.thread(PID, AUTOGRAD, "pt_autograd_0")
    steps = [(f"Warm-up Step {i}", None, True) for i in range(warm_steps)]
    steps += [(f"Step {i}", i, False) for i in range(STEPS)]
    launched = []
    for n, (name, step, warm) in enumerate(steps):
        start = n * STEP_MS
        b.range(PID, MAIN, start, start + STEP_MS, name)
        for k, (phase, tid) in enumerate((("Forward", MAIN), ("Backward", AUTOGRAD))):
            at = start + k * PHASE_MS
            b.range(PID, MAIN, at, at + PHASE_MS, phase)
            corr = len(launched) + 1
            b.launch(PID, tid, at + 2, at + 3, corr)
            b.kernel(PID, DEVICE, STREAM, at + 4, at + 6, corr, name=f"k{corr}")
            launched.append({"step": step, "phase": phase.lower(), "warmup": warm})
    b.write(path)
    return launched


def _attributed(tmp_path: Path, *rules: str) -> tuple[pl.DataFrame, list[dict]]:
    path, out = tmp_path / "bench.sqlite", tmp_path / "out"
    launched = _benchmark_export(path)
    result = CliRunner().invoke(cli, ["attribute", str(path), "-o", str(out), "--quiet", *rules])
    assert result.exit_code == 0, result.output
    return pl.read_parquet(out / "ops.parquet").sort("launch_start_ns"), launched


@pytest.fixture(scope="module")
def built_in(tmp_path_factory) -> tuple[Path, pl.DataFrame, list[dict]]:
    """The export attributed with the built-in rules (read, never changed, by the tests):
    its output folder, operations and launches."""
    root = tmp_path_factory.mktemp("warmup")
    ops, launched = _attributed(root)
    return root / "out", ops, launched


@pytest.mark.slow
def test_warm_up_steps_keep_their_phases_and_are_marked(built_in):
    _, ops, launched = built_in
    assert ops.select("step", "phase", "warmup").to_dicts() == launched
    assert ops["warmup"].sum() == 2 * WARM_STEPS


@pytest.mark.slow
def test_forward_passes_are_the_measured_steps(built_in):
    _, ops, _ = built_in
    measured = ops.filter(~pl.col("warmup"))
    forward = measured.filter(pl.col("phase") == "forward")
    assert forward["step"].n_unique() == STEPS
    assert forward.height / forward["step"].n_unique() == 1  # one kernel per forward pass
    # Every forward pass, warm-up ones included, is in phase forward.
    assert ops.filter(pl.col("phase") == "forward").height == WARM_STEPS + STEPS


@pytest.mark.slow
def test_a_users_phase_rule_wins_inside_warm_up_steps(tmp_path):
    ops, launched = _attributed(tmp_path, "--phase", "loss=^Backward$")
    want = [{**k, "phase": "loss" if k["phase"] == "backward" else k["phase"]} for k in launched]
    assert ops.select("step", "phase", "warmup").to_dicts() == want


@pytest.mark.slow
def test_a_users_rule_replaces_the_built_in_reading_of_the_names_it_matches(tmp_path):
    # The user's rule reads `Warm-up Step N` as a step: no built-in warm-up mark.
    ops, launched = _attributed(tmp_path, "--step", r"^Warm-up Step (\d+)$")
    assert not ops["warmup"].any()
    # With a warm-up rule of their own beside it, the warm-up steps are numbered and marked.
    rules = ["--step", r"^Warm-up Step (\d+)$", "--phase", "warmup=^Warm-up"]
    ops, launched = _attributed(tmp_path, *rules)
    numbered = [k["step"] if k["step"] is not None else i // 2 for i, k in enumerate(launched)]
    assert ops["step"].to_list() == numbered
    assert ops["warmup"].to_list() == [k["warmup"] for k in launched]


@pytest.mark.corpus
def test_param_forward_passes_in_warm_up_and_measure_ranges():
    """PARAM's AlexNet benchmark: `[param|...|warmup|forward]` and `[...|measure|forward]`."""
    profile = load_profile(corpus_path("hta_param_alexnet_warmup_measure_annotations_a100.json.gz"))
    ops = attribute(profile)
    path = pl.col("range_path")
    warm = ops.filter(path.str.contains("|warmup|forward]", literal=True))
    measured = ops.filter(path.str.contains("|measure|forward]", literal=True))
    assert warm.height and measured.height
    assert (warm["phase"] == "forward").all() and warm["warmup"].all()
    assert (measured["phase"] == "forward").all() and not measured["warmup"].any()
    # Nothing else is forward or warm-up work (clear_cache, the copies of `[param|cuda]`).
    forward_range = path.str.contains("|forward]", literal=True).fill_null(False)
    rest = ops.filter(~forward_range)
    assert rest["phase"].is_null().all() and not rest["warmup"].any()


def test_the_report_leaves_warm_up_work_out_of_per_step_figures(built_in):
    _, ops, _ = built_in
    forward = scope_filter(ops, "forward")
    assert passes(forward) == STEPS and forward.height == STEPS


def test_an_older_output_reads_its_warm_up_phase_as_the_mark(built_in, tmp_path):
    """Before output schema 1.5 warm-up work had phase `warmup` and no `warmup` column."""
    out, ops, _ = built_in
    run = shutil.copytree(out, tmp_path / "out")
    old = ops.with_columns(
        pl.when(pl.col("warmup")).then(pl.lit("warmup")).otherwise(pl.col("phase")).alias("phase")
    ).drop("warmup")
    old.write_parquet(run / "ops.parquet")
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "output_schema_version": "1.4"}))
    read = read_run(run).ops.sort("launch_start_ns")
    assert read["warmup"].to_list() == ops["warmup"].to_list()
    assert read.filter("warmup")["phase"].is_null().all()
    assert read.filter(~pl.col("warmup"))["phase"].to_list() == (
        ops.filter(~pl.col("warmup"))["phase"].to_list()
    )


@pytest.mark.corpus
def test_an_unlabelled_first_iteration_is_not_called_warm_up():
    """CS336's benchmark: `benchmark_iteration` > `forward`, `backward`, the first iteration
    slower but named like the others (NVTX only, no GPU work): nothing is warm-up."""
    path = corpus_path("cs336a2_bench_iteration_fwd_bwd_nvtx_only_a10.sqlite")
    query = "SELECT DISTINCT coalesce(n.text, s.value) FROM NVTX_EVENTS n "
    query += "LEFT JOIN StringIds s ON s.id = n.textId"
    with connect(path) as conn:
        names = sorted(row[0].decode() for row in conn.execute(query) if row[0] is not None)
    labels = name_labels(pl.Series(names), ["lbl_step", "lbl_phase", "lbl_warmup"])
    assert dict(zip(names, labels.rows(), strict=True)) == {
        "backward": (None, "backward", None),
        "benchmark_iteration": (None, None, None),
        "forward": (None, "forward", None),
    }


def _ms_per_step(line: str) -> float:
    """`A: DIR (scope): 4.000 ms per step` -> 4.0"""
    return float(line.rsplit(": ", 1)[1].split()[0])


@pytest.mark.slow
def test_diff_divides_by_the_measured_steps_not_the_warm_up(tmp_path: Path):
    """The same three measured steps after two warm-up steps and after none: `nsysmap diff`
    divides each run by its 3 measured steps, as its report counts them (4 ms per step:
    two 2 ms kernels), so a gate sees no change; the same run whose structure is found
    again (no structure.parquet) divides alike, and says how its structure was had."""
    outs = {}
    for warm in (WARM_STEPS, 0):
        _benchmark_export(tmp_path / f"w{warm}.sqlite", warm)
        outs[warm] = tmp_path / f"w{warm}"
        args = ["attribute", str(tmp_path / f"w{warm}.sqlite"), "-o", str(outs[warm]), "--quiet"]
        assert CliRunner().invoke(cli, args).exit_code == 0
    gate = ["diff", str(outs[WARM_STEPS]), str(outs[0]), "--fail-above", "5"]
    result = CliRunner().invoke(cli, gate)
    assert result.exit_code == 0, result.output
    head = result.output.splitlines()[:2]
    assert [_ms_per_step(line) for line in head] == [4.0, 4.0], head
    assert "(3 measured steps)" in head[0], head
    report = CliRunner().invoke(cli, ["report", str(outs[WARM_STEPS]), "--quiet"])
    assert report.exit_code == 0
    answers = json.loads((outs[WARM_STEPS] / "answers.json").read_text())
    assert answers["scopes"]["step"]["steps"] == 3
    # An output without structure.parquet (an older nsysmap's): found again, and said.
    old = tmp_path / "old"
    shutil.copytree(outs[WARM_STEPS], old)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["tables"]["structure"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    (old / "structure.parquet").unlink()
    result = CliRunner().invoke(cli, ["diff", str(old), str(outs[WARM_STEPS])])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [_ms_per_step(line) for line in lines[:2]] == [4.0, 4.0], lines[:2]
    assert lines[2].startswith("A: No structure.parquet here"), lines[2]
