"""`nsysmap report` on the synthetic GPT-2 samples, numbers checked by hand.

The samples (sample_reports/build.py) run 2 steps of a 2-block GPT-2 on an
"NVIDIA H100 80GB HBM3"; every kernel takes whole milliseconds. Per step:

    data      memcpy 1 ms
    forward   embedding 1, per block: ln 1, c_attn gemm 3, attention gemm 2 + softmax 2
              + gemm 2, c_proj gemm 1, add 1, ln 1, c_fc gemm 4, gelu 1, c_proj gemm 4,
              add 1 (23 ms, 6 gemms); ln_f 1, lm_head gemm 5   -> 53 ms, 13 gemms = 37 ms
    loss      cross-entropy 2
    backward  cross-entropy 2, then the forward kernels in reverse with every gemm
              launched twice                                  -> 92 ms, 26 gemms = 74 ms
    optimizer 2 x Adam 2                                      -> 4 ms
    step      152 ms, of which gemm 111 ms

plus, outside the steps, an NCCL kernel (3 ms) and an add (1 ms). The
inference sample has data + forward only: 54 ms per step, gemm 37 ms.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from nsysmap.cli import cli
from nsysmap.core.errors import NotAnOutput
from nsysmap.flops.flops_document import attach_model_flops
from nsysmap.flow.verbs import analyse, analyse_file, load_profile, write
from nsysmap.report.answers import ReportOptions
from nsysmap.report.build import build_report
from nsysmap.report.report_files import read_run
from tests.cli_runner import nsysmap_cli
from tests.corpus import CORPUS, needs_corpus
from tests.samples import SAMPLES, analyse_samples

MS = 1_000_000
SGEMM = "ampere_sgemm_128x64_tn"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("samples")
    return analyse_samples(root)


@pytest.fixture(scope="module")
def report(outputs):
    return build_report(read_run(outputs["train"]), read_run(outputs["infer"]))


def summary(result, metric: str, scope: str, run: str = "main") -> float | None:
    table = result.tables["report_summary"]
    hit = table.filter(
        (pl.col("run") == run) & (pl.col("metric") == metric) & (pl.col("scope") == scope)
    )
    return hit["value"].item()


@pytest.mark.slow
def test_matmul_share_in_the_full_step_and_in_forward_only(report):
    assert summary(report, "matmul_time_share", "step") == 222 / 304
    assert summary(report, "matmul_time_share", "forward") == 74 / 106
    assert summary(report, "matmul_time_share", "forward_backward") == 222 / (106 + 4 + 184)
    assert summary(report, "matmul_time_share", "step", "compare") == 74 / 108
    assert summary(report, "time_ns", "step") == 304 * MS
    assert summary(report, "steps", "step") == summary(report, "forward_passes", "forward") == 2
    assert "- 2 measured steps: 73.0 % of 304.000 ms is matrix multiplication." in report.markdown
    assert "- Forward-only run, full step: 68.5 % of 108.000 ms." in report.markdown
    shares = report.answers["answers"]["matmul_share"]
    assert shares["scopes"]["step"]["share"] == 222 / 304
    assert shares["compare"]["step"]["share"] == 74 / 108


@pytest.mark.slow
def test_top_kernel_and_its_calls_per_forward_pass_and_per_step(report):
    top = report.tables["report_top_kernels"].filter(pl.col("rank") == 1)
    rows = {(r["run"], r["scope"]): r for r in top.iter_rows(named=True)}
    assert {r["name"] for r in rows.values()} == {SGEMM}
    forward, step = rows[("main", "forward")], rows[("main", "step")]
    assert (forward["calls"], forward["passes"], forward["calls_per_pass"]) == (26, 2, 13.0)
    assert (step["calls"], step["passes"], step["calls_per_pass"]) == (78, 2, 39.0)
    assert step["time_ns"] == 222 * MS and step["time_share"] == 222 / 304
    assert rows[("main", "forward_backward")]["calls"] == 78
    assert rows[("compare", "step")]["calls_per_pass"] == 13.0
    assert "Same top kernel with backward included: yes (forward: `" in report.markdown
    assert report.answers["answers"]["top_kernel"]["same_with_backward"] is True


@pytest.mark.slow
def test_non_matmul_kernels_above_one_percent(report):
    table = report.tables["report_non_matmul"]
    by_short = table.group_by("short_name").agg(pl.col("time_ns").sum(), pl.col("calls").sum())
    got = {
        r["short_name"]: (r["calls"], r["time_ns"] // MS) for r in by_short.iter_rows(named=True)
    }
    assert got == {
        "vectorized_layer_norm_kernel": (20, 20),
        "softmax_warp_forward": (8, 16),
        "vectorized_elementwise_kernel": (16 + 8, 16 + 8),  # add and gelu
        "multi_tensor_apply_kernel": (4, 8),
        "cunn_SoftMaxForward": (2, 4),
        "cunn_SoftMaxBackward": (2, 4),
        "indexSelectLargeIndex": (4, 4),
    }  # the batch copy (2 ms, 0.7 %) and the NCCL kernel (outside the steps) are not
    assert table["category"].is_in(["gemm", "attention"]).sum() == 0


def test_category_shares_of_step_time(report):
    table = report.tables["report_category"]
    shares = dict(zip(table["category"], table["time_share"], strict=True))
    assert shares == pytest.approx(
        {
            "gemm": 222 / 304,
            "elementwise": 28 / 304,
            "softmax": 24 / 304,
            "normalization": 20 / 304,
            "optimizer": 8 / 304,
            "memcpy": 2 / 304,
        }
    )
    assert table["flop_share"].is_null().all()


def test_softmax_against_the_attention_matmuls_in_time(report):
    # attention modules per block and step: gemm 4 ms forward + 8 ms backward, softmax 2 + 2
    assert summary(report, "attention_softmax_to_matmul_time_ratio", "step") == 16 / 48
    assert report.findings.attention_source == "modules"
    assert summary(report, "softmax_to_matmul_time_ratio", "step") == 24 / 222
    assert summary(report, "softmax_to_matmul_flop_ratio", "step") is None


def test_time_by_phase_and_by_layer(report):
    phases = report.tables["report_phases"]
    assert dict(zip(phases["phase"], phases["time_ns"], strict=True)) == {
        "backward": 184 * MS,
        "forward": 106 * MS,
        "optimizer": 8 * MS,
        "loss": 4 * MS,
        None: 4 * MS,
        "data": 2 * MS,
    }
    layers = report.tables["report_layers"]
    attn = layers.filter(pl.col("layer") == "transformer.h.*.attn").row(0, named=True)
    assert (attn["modules"], attn["forward_ns"], attn["backward_ns"]) == (2, 24 * MS, 40 * MS)


def test_what_the_samples_cannot_answer(report):
    notes = report.findings.notes
    assert any(n.startswith("No FLOPs, so no TFLOP/s or MFU") for n in notes)
    assert report.tables["report_module_phase"]["mfu"].is_null().all()
    assert "No operator carries recorded input shapes." in report.markdown
    devices = report.tables["report_devices"]
    assert devices["device_name"].to_list() == ["NVIDIA H100 80GB HBM3"]


def flop_document() -> dict:
    """A hand-made FLOP document for the sample model (one step, exclusive per module)."""

    def row(module, cls, direction, kind, matmul, other=0, part=""):
        return {
            "module": module,
            "module_class": cls,
            "direction": direction,
            "op": "aten::mm",
            "part": part,
            "kind": kind,
            "input_shapes": "[]",
            "calls": 1,
            "matmul_flop": matmul,
            "other_flop_estimate": other,
        }

    attn = "transformer.h.0.attn"
    return {
        "format": "nsysmap-flops",
        "version": 1,
        "model_class": "GPT2LMHeadModel",
        "input_shape": [8, 128],
        "compute_dtype": "float32",
        "rows": [
            row("lm_head", "Linear", "forward", "matmul", 167_500_000_000),
            row("lm_head", "Linear", "backward", "matmul", 335_000_000_000),
            row(attn, "GPT2Attention", "backward", "attention", 1e9, part="recompute_scores"),
            row(attn, "GPT2Attention", "backward", "attention", 2e9, part="grad_query"),
            row("transformer.drop", "Dropout", "forward", "dropout", 0, 1000),
        ],
        "modules": [],
    }


@pytest.fixture(scope="module")
def with_model_flops(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("flops") / "train"
    (run / "capture").mkdir(parents=True)
    (run / "capture" / "flops.json").write_text(json.dumps(flop_document()))
    analysis = analyse(load_profile(SAMPLES / "gpt2_tiny_train.sqlite"))
    write(attach_model_flops(analysis, run / "capture"), run)
    assert (run / "flops.parquet").is_file()
    return run


@pytest.mark.slow
def test_model_flops_give_tflops_and_mfu_per_module_and_phase(with_model_flops):
    result = build_report(read_run(with_model_flops))  # dtype from the document: float32
    assert result.findings.source == "model"
    table = result.tables["report_module_phase"]

    def row(module, phase):
        return table.filter((pl.col("module") == module) & (pl.col("phase") == phase)).row(
            0, named=True
        )

    # lm_head: 167.5 GFLOP per step, 2 steps, 5 ms per step: 33.5 TFLOP/s = half of 67
    head = row("lm_head", "forward")
    assert (head["matmul_flop"], head["time_ns"], head["flop_source"]) == (335e9, 10 * MS, "model")
    assert head["tflops_per_s"] == pytest.approx(33.5)
    assert head["peak_tflops"] == 67.0 and head["mfu"] == pytest.approx(0.5)
    assert row("lm_head", "backward")["mfu"] == pytest.approx(0.5)  # 670 GFLOP in 20 ms
    # recomputed attention scores are work (TFLOP/s) but not model FLOPs (MFU)
    attn = row("transformer.h.0.attn", "backward")
    assert (attn["matmul_flop"], attn["recompute_flop"], attn["time_ns"]) == (6e9, 2e9, 20 * MS)
    assert attn["tflops_per_s"] == pytest.approx(0.3)
    assert attn["mfu"] == pytest.approx(4e9 / 0.020 / 67e12)
    drop = row("transformer.drop", "forward")  # FLOPs but no kernel of its own
    assert (drop["ops"], drop["time_ns"], drop["other_flop_estimate"]) == (0, 0, 2000)
    assert drop["tflops_per_s"] is None


@pytest.mark.slow
def test_model_flops_by_category_and_softmax_ratio(with_model_flops):
    result = build_report(read_run(with_model_flops), options=ReportOptions(dtype="tf32"))
    table = result.tables["report_category"]
    flops = dict(zip(table["category"], table["matmul_flop"], strict=True))
    assert flops["gemm"] == 2 * (167.5e9 + 335e9) and flops["attention"] == 2 * 3e9
    total = 2 * (502.5e9 + 3e9) + 2 * 1000
    shares = dict(zip(table["category"], table["flop_share"], strict=True))
    assert shares["gemm"] == pytest.approx(1005e9 / total)
    assert result.tables["report_devices"]["peak_tflops"].to_list() == [494.7]


@pytest.mark.slow
def test_unknown_device_or_dtype_means_no_mfu_said_plainly(with_model_flops):
    run = read_run(with_model_flops)
    result = build_report(run, options=ReportOptions(device_name="Imaginary GPU 9000"))
    assert result.tables["report_module_phase"]["mfu"].is_null().all()
    assert any("'Imaginary GPU 9000' is not in nsysmap's table" in n for n in result.findings.notes)
    given = build_report(run, options=ReportOptions(peak_tflops=33.5))
    head = given.tables["report_module_phase"].filter(pl.col("module") == "lm_head")
    assert head["mfu"].to_list() == pytest.approx([1.0, 1.0])


def test_flops_source_can_be_forced_and_said_missing(outputs):
    run = read_run(outputs["train"])
    result = build_report(run, options=ReportOptions(flops="model"))
    assert result.findings.source is None
    assert "no FLOP document of the model" in result.findings.source_note


@pytest.mark.slow
def test_command_writes_markdown_and_tables(outputs, tmp_path):
    target = tmp_path / "answers.md"
    argv = [
        "report",
        str(outputs["train"]),
        "--compare",
        str(outputs["infer"]),
        "--markdown",
        str(target),
    ]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    printed = result.stdout
    assert target.read_text() in printed + "\n" and printed.startswith("# nsysmap report")
    for name in ("report_summary", "report_module_phase", "report_category", "report_shapes"):
        assert pl.read_parquet(outputs["train"] / f"{name}.parquet").width > 0
    top = pl.read_parquet(outputs["train"] / "report_top_kernels.parquet")
    assert set(top["run"]) == {"main", "compare"}


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["report", "no/such/dir"], 3),
        (["report", "."], 3),  # a directory without manifest.json
        (["report", "--dtype", "fp64", "."], 2),
    ],
)
def test_command_errors(argv, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert nsysmap_cli(argv) == code


def test_rank_of_a_one_run_output_is_refused_in_one_line(outputs, capsys):
    assert nsysmap_cli(["report", outputs["train"], "--rank", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--rank reads an output of several ranks" in err
    assert not (outputs["train"] / "rank0").exists()


@pytest.mark.corpus
@needs_corpus
@pytest.mark.parametrize(
    "name", ["fastvideo_training_mfu_h100x2_before", "dlprof_pytorch_small_cnn_rtx2070"]
)
def test_real_exports_answer_what_they_can(name, tmp_path):
    analyse_file(CORPUS / f"{name}.sqlite", tmp_path)
    result = build_report(read_run(tmp_path))
    notes = " ".join(result.findings.notes)
    assert "No steps in the measured region" in notes and "No FLOPs" in notes
    assert "no matmul operator carries recorded input shapes" in notes
    top = result.tables["report_top_kernels"]
    scopes = result.answers["scopes"]
    if name.startswith("fastvideo"):  # no phases; FSDP's block calls are layers, not passes
        assert set(top["scope"]) == {"forward", "step"}
        assert scopes["forward"]["source"].startswith("the kernel sequence")
        assert scopes["forward"]["label"] == "2 measured forward passes"  # one per device
    else:  # no phases, no modules, no repeating kernel sequence: only the whole capture
        assert set(top["scope"]) == {"step"}
        assert scopes["step"]["label"] == "whole capture"
    # the measured region: the operations launched in its span (structure.parquet), on
    # each device; what was launched before the capture (no launch call) is in none
    regions = pl.read_parquet(tmp_path / "structure.parquet").filter(
        (pl.col("kind") == "region") & (pl.col("region") == "measured")
    )
    ops = pl.read_parquet(tmp_path / "ops.parquet").join(regions, on=["device_id", "pid"])
    at = pl.coalesce("launch_start_ns", "start_ns")
    launched = pl.col("launch_start_ns").is_not_null() | pl.col("launch_start_ns").is_null().all()
    ops = ops.filter(at.is_between(pl.col("start_ns_right"), pl.col("end_ns_right")) & launched)
    best = ops.filter(pl.col("kind") == "kernel").group_by("name").agg(pl.col("dur_ns").sum())
    step_top = top.filter((pl.col("rank") == 1) & (pl.col("scope") == "step"))
    assert step_top["name"].item() == best.sort("dur_ns").tail(1)["name"].item()
    assert summary(result, "matmul_time_share", "step") == pytest.approx(
        ops.filter(pl.col("category").is_in(["gemm", "attention"]))["dur_ns"].sum()
        / ops["dur_ns"].sum()
    )
    assert "## Input shapes" in result.markdown


def test_mfu_over_the_steps_wall_time(with_model_flops):
    result = build_report(read_run(with_model_flops))
    steps = pl.read_parquet(with_model_flops / "by_step.parquet").filter(
        pl.col("step").is_not_null()
    )
    wall_ns = (steps["last_end_ns"] - steps["first_start_ns"]).sum()
    # model FLOPs of the two steps: lm_head forward and backward, attention minus recompute
    model_flop = 2 * (167.5e9 + 335e9) + 2 * 2e9
    assert summary(result, "step_wall_ns", "step") == wall_ns
    assert summary(result, "mfu_step_wall", "step") == pytest.approx(
        model_flop / (wall_ns * 1e-9) / 67e12
    )
    busy = (304 + 4) * MS  # every operation of the capture
    assert summary(result, "mfu", "capture") == pytest.approx(model_flop / (busy * 1e-9) / 67e12)
    assert "Over the steps' wall time" in result.markdown


@pytest.mark.slow
def test_kineto_cuda_trace_shapes_flops_and_mfu_on_two_different_gpus(tmp_path):
    """A hand-written CUDA trace (tests/test_torch_trace.py): fc1's addmm [8,16]x[16,32]
    runs 3.25 µs on an A100, its backward mm [8,32]x[32,16] 2 µs on an H100."""
    from tests.test_torch_trace import CUDA_TRACE

    trace = tmp_path / "cuda.pt.trace.json"
    trace.write_text(json.dumps(CUDA_TRACE))
    analyse_file(trace, tmp_path / "out")
    result = build_report(read_run(tmp_path / "out"), options=ReportOptions(dtype="fp32"))
    assert result.findings.source == "shapes"
    devices = result.tables["report_devices"]
    assert devices["peak_tflops"].to_list() == [19.5, 67.0]  # A100 and H100, fp32
    rows = result.tables["report_module_phase"].filter(pl.col("module") == "fc1").sort("device_id")
    flop = 2 * 8 * 16 * 32
    assert rows["matmul_flop"].to_list() == [flop, flop]
    assert rows["other_flop_estimate"].to_list() == [8 * 32, 0]  # addmm's bias
    assert rows["mfu"].to_list() == pytest.approx([flop / 3.25e-6 / 19.5e12, flop / 2e-6 / 67e12])
    layer = result.tables["report_layers"].row(0, named=True)  # devices pooled: Σ time·peak
    assert layer["layer"] == "fc1"
    assert layer["mfu"] == pytest.approx(2 * flop / (3.25e-6 * 19.5e12 + 2e-6 * 67e12))
    assert layer["tflops_per_s"] == pytest.approx(2 * flop / 5.25e-6 / 1e12)


def test_an_ops_table_of_another_format_is_refused_in_one_line(tmp_path):
    (tmp_path / "manifest.json").write_text(
        json.dumps({"tables": {"ops": {"file": "ops.parquet"}}})
    )
    pl.DataFrame({"a": [1]}).write_parquet(tmp_path / "ops.parquet")
    assert nsysmap_cli(["report", str(tmp_path)]) == 4


@pytest.mark.slow
def test_the_compared_run_is_named_for_what_it_is(outputs, report):
    assert "(forward-only run), steps: 2" in report.markdown
    assert "It is not known to be forward-only" not in report.markdown
    # A training run given as the comparison is not called forward-only.
    twice = build_report(read_run(outputs["train"]), read_run(outputs["train"]))
    assert "forward-only run" not in twice.markdown
    assert "(training run: backward is " in twice.markdown
    assert "- Compared run, full step: 73.0 % of 304.000 ms." in twice.markdown
    assert "Compared run: It is not known to be forward-only" in twice.markdown


@pytest.mark.slow
def test_each_share_names_its_denominator(outputs, report):
    """The report divides categories by the time in steps (304 ms); the attribute summary by
    all GPU time (304 ms plus the NCCL kernel and the add outside the steps, 4 ms)."""
    assert "Shares are of the time in the 2 measured steps (304.000 ms of 308.000 ms in all)" in (
        report.markdown
    )
    text = analyse_file(SAMPLES / "gpt2_tiny_train.sqlite", outputs["train"]).summary_text
    assert "Shares below are of all that time, devices together" in text
    assert text.startswith(f"input {SAMPLES / 'gpt2_tiny_train.sqlite'}\n")  # labelled


def test_an_older_output_reads_window_as_other_thread(outputs, tmp_path):
    """Output schema 1.2 called `other_thread` `window`: read_run maps it, newer ones as written."""
    run = tmp_path / "old"
    shutil.copytree(outputs["train"], run)
    ops = pl.read_parquet(run / "ops.parquet")
    assert "other_thread" in set(ops["attribution"])  # the sample has some
    old = ops.with_columns(pl.col("attribution").cast(pl.String).replace("other_thread", "window"))
    old.write_parquet(run / "ops.parquet")
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "output_schema_version": "1.2"}))
    read = read_run(run).ops
    assert read["attribution"].dtype == ops["attribution"].dtype
    assert read["attribution"].to_list() == ops["attribution"].to_list()
    (run / "manifest.json").write_text(json.dumps(manifest))  # 1.3 on has no `window`
    with pytest.raises(NotAnOutput, match="not an ops table"):
        read_run(run)
