"""The report's wording on what real profiles showed: whole counts, scopes said as they
are, work outside every phase named, singular and plural, several devices."""

from __future__ import annotations

import polars as pl
import pytest

from nsysmap.attribution.attribute import attribute
from nsysmap.flow.verbs import analyse, analyse_file, load_profile
from nsysmap.report.answers import RunData
from nsysmap.report.build import build_report
from nsysmap.report.format import ms, pct, per
from nsysmap.report.report_files import read_run
from nsysmap.summaries.range_paths import is_user_range
from nsysmap.summaries.summarise import summarise
from nsysmap.summaries.summary_text import render_summary
from tests.corpus import corpus_path
from tests.frames import MS, Frames


def _report(f: Frames):
    analysis = analyse(f.profile())
    summaries = analysis.summaries
    run = RunData(
        "run", analysis.ops, analysis.manifest, by_range=summaries.by_range, waits=summaries.waits
    )
    return build_report(run)


def _section(markdown: str, title: str) -> str:
    return markdown.split(f"## {title}\n")[1].split("\n## ")[0]


def _two_steps(kernels_per_forward: int) -> Frames:
    f = Frames()
    for step in range(2):
        at = 100 * step
        f.range(1, f"step {step}", at, at + 90)
        f.range(1, "forward", at, at + 40)
        for i in range(kernels_per_forward):
            f.kernel(1, at + 1 + i, "ampere_sgemm_128x64_tn", dur=1)
        f.range(1, "backward", at + 40, at + 80)
        f.kernel(1, at + 41, "elementwise_kernel", dur=1)
    return f


@pytest.mark.slow
def test_whole_calls_per_pass_print_without_decimals():
    """24 calls in each forward pass are 24, not 24.00; a fraction keeps two decimals."""
    result = _report(_two_steps(3))
    top = result.answers["answers"]["top_kernel"]["scopes"]["forward"]
    assert top["calls_per_forward_pass"] == 3
    brief = _section(result.markdown, "Answers in brief")
    assert "3 calls per forward pass" in brief and "3.00" not in brief
    row = next(
        line
        for line in _section(result.markdown, "Top kernel by cumulative time").splitlines()
        if line.startswith("| this run | forward")
    )
    assert "| 6 | 3 | 3 |" in row
    assert per(2.5) == "2.50" and per(1350.0) == "1,350" and per(None) == "–"


@pytest.mark.corpus
def test_implicit_gemm_convolutions_count_as_matrix_multiplication(tmp_path):
    """mmagic on A100: the CUTLASS and xmma implicit-GEMM convolutions (tf32, tensor cores)
    are matmul work, not the largest non-matmul kernels; the FFT transforms and im2col
    lowering of the other convolutions are not; the definition line says so."""
    analyse_file(corpus_path("mmagic_vsr_pyprof_dict_nvtx_markers_a100.sqlite"), tmp_path)
    ops = pl.read_parquet(tmp_path / "ops.parquet", columns=["name", "category", "dur_ns"])
    conv_gemm = ops.filter(pl.col("name").str.contains("s1688fprop|fprop_implicit_gemm"))
    assert conv_gemm.height == 12 and set(conv_gemm["category"]) == {"gemm"}
    others = ops.filter(pl.col("name").str.contains("fft2d_|im2col|flip_filter"))
    assert others.height and set(others["category"]) == {"convolution"}
    result = build_report(read_run(tmp_path))
    share = result.answers["answers"]["matmul_share"]["scopes"]["step"]
    gemm = ops.filter(pl.col("category").is_in(["gemm", "attention"]))["dur_ns"].sum()
    assert share["matmul_time_ns"] == gemm and gemm >= conv_gemm["dur_ns"].sum()
    section = _section(result.markdown, "Matrix multiplication's share of time")
    assert "Matrix multiplication = gemm kernels (convolutions run as implicit or explicit " in (
        section
    )
    non_matmul = _section(result.markdown, "Non-matmul kernels above 1.0 % of the time")
    assert "fprop" not in non_matmul and "fft2d_r2c_32x32" in non_matmul


@pytest.mark.slow
def test_shapes_of_an_export_without_modules_take_their_direction_from_the_phase():
    """emit_nvtx exports (cs336): no module calls, yet forward and backward phase ranges;
    the shapes table says each call's direction from them, and opens by saying which
    operators it lists and where the direction comes from."""
    f = Frames()
    f.range(1, "forward", 0, 10)
    f.range(1, "aten::addmm, seq = 1, op_id = 1, sizes = [[4], [2, 3], [3, 4], [], []]", 1, 3)
    f.kernel(1, 2, "ampere_sgemm_128x64_tn", dur=1)
    f.range(1, "loss", 10, 15)
    f.range(1, "aten::sum, seq = 2, op_id = 2, sizes = [[2, 4], []]", 11, 13)
    f.kernel(1, 12, "reduce_kernel", dur=1)
    f.range(1, "backward", 20, 30)
    f.range(1, "aten::mm, seq = 3, op_id = 3, sizes = [[2, 4], [4, 3]]", 21, 23)
    f.kernel(1, 22, "ampere_sgemm_64x32_sliced1x4_nt", dur=1)
    section = _section(_report(f).markdown, "Input shapes")
    assert "| addmm / linear | `aten::addmm` | forward | `[[4], [2, 3], [3, 4], [], []]` |" in (
        section
    )
    assert "| addmm / linear | `aten::mm` | backward | `[[2, 4], [4, 3]]` |" in section
    assert "| sum | `aten::sum` | – |" in section  # the loss: neither direction
    opening = section.split("\n\n")[0]
    assert "addmm / linear (with mm, matmul, bmm and baddbmm)" in opening
    assert "else the phase the call ran in" in opening


@pytest.mark.slow
def test_attention_ranges_of_the_forward_pass_only_say_so():
    """cs336: the ranges around attention mark only the forward pass, while the softmax
    section's scope is the whole step; the brief and the section say what they cover."""
    f = Frames()
    f.range(1, "forward", 0, 20)
    f.range(1, "attention", 1, 10)
    f.range(1, "scores matmul", 1, 4)
    f.kernel(1, 2, "ampere_sgemm_128x64_tn", dur=2)
    f.range(1, "softmax", 5, 8)
    f.kernel(1, 6, "softmax_warp_forward", dur=1)
    f.range(1, "backward", 20, 40)
    f.kernel(1, 21, "ampere_sgemm_64x32_sliced1x4_nt", dur=4)
    f.kernel(1, 26, "softmax_warp_backward", dur=1)
    result = _report(f)
    answer = result.answers["answers"]["softmax_vs_matmul"]
    assert answer["attention_source"] == "ranges"
    assert answer["attention_phases"] == ["forward"]
    assert answer["step_phases"] == ["forward", "backward"]
    brief = _section(result.markdown, "Answers in brief")
    assert "- Softmax, in the forward phase only (what the attention ranges hold): " in brief
    section = _section(result.markdown, "Softmax versus the attention matmuls")
    assert "The attention ranges hold work of the forward phase only" in section


def _waits_brief(f: Frames) -> str:
    brief = _section(_report(f).markdown, "Answers in brief")
    return next(line for line in brief.splitlines() if line.startswith("- Where the GPU waits"))


@pytest.mark.slow
def test_the_waits_sentence_says_one_step_and_one_launch_call_in_the_singular():
    """ "Over 1 step window ... in 1 launch calls; 1 operations ran": singular where one."""
    f = Frames()
    f.range(1, "step 1", 0, 10)
    f.kernel(1, 1, "ampere_sgemm_128x64_tn", dur=3)
    said = _waits_brief(f)
    assert "Over the step's window, the busiest stream (device 0, stream 7) was busy" in said
    assert "in 1 launch call;" in said and "1 operation ran" not in said
    f.range(1, "step 2", 20, 30)
    f.kernel(1, 21, "ampere_sgemm_128x64_tn", dur=3)
    f.kernel(1, 27, "elementwise_kernel", dur=1)
    assert "Over the 2 steps' windows, the busiest stream" in _waits_brief(f)


@pytest.mark.slow
def test_the_waits_sentence_names_the_busiest_stream_of_each_device():
    """fastvideo on 2 GPUs: the brief named device 0's busiest stream as if it were the only
    one; it names each device's, and says how many devices there are."""
    f = Frames()
    f.kernel(1, 1, "ampere_sgemm_128x64_tn", dur=3)
    f.kernel(2, 1, "ampere_sgemm_128x64_tn", dur=5, device=1, pid=2)
    f.kernel(2, 9, "elementwise_kernel", dur=1, device=1, pid=2)
    said = _waits_brief(f)
    assert "Over the capture (2 devices, the busiest stream of each): device 0, stream 7, was" in (
        said
    )
    assert ". Device 1, stream 7, was busy" in said


@pytest.mark.slow
def test_a_graph_launch_of_many_kernels_is_one_launch_call():
    """vLLM on MI300X: 421 kernels of one hipGraphLaunch each counted that call, so the
    brief said the host spent 213 ms in 434 launch calls (one call of 0.5 ms, really)."""
    f = Frames()
    nodes = [f.kernel(None, 0, f"node_{i}", dur=1, run_at=6 + 2 * i) for i in range(3)]
    for op_id in nodes:
        f.ops[op_id]["correlation_id"] = 999
    launch = dict(pid=1, tid=1, correlation_id=999, api_name="cudaGraphLaunch_v10000")
    f.calls.append({**launch, "start_ns": 0, "end_ns": 5 * MS})
    f.kernel(1, 20, "elementwise_kernel", dur=1)
    cost = analyse(f.profile()).summaries.waits["launch_cost"]
    totals = cost.select(pl.col("ops", "launches", "launch_cpu_ns", "shorter_than_launch").sum())
    assert totals.row(0) == (4, 2, 5 * MS + 1000, 0)
    assert "The host spent 5.001 ms in 2 launch calls;" in _waits_brief(f)


@pytest.mark.corpus
def test_a_category_without_counted_flops_has_no_flop_share(tmp_path):
    """vLLM on MI300X: one GEMM carries shapes, the attention kernels none; attention's FLOP
    share was 0.0 % beside unknown (–) FLOPs."""
    analyse_file(
        corpus_path("tracelens_vllm_gptoss_fullgraph_decode_hipgraph_mi300x.json.gz"), tmp_path
    )
    result = build_report(read_run(tmp_path))
    rows = {r["category"]: r for r in result.answers["answers"]["categories"]["rows"]}
    assert rows["attention"]["matmul_flop"] is None and rows["attention"]["flop_share"] is None
    assert rows["gemm"]["flop_share"] > 0
    section = _section(result.markdown, "Kernel categories: share of time and share of FLOPs")
    assert "FLOP shares are of the FLOPs counted" in section
    assert any(
        line.startswith("| attention |") and line.endswith("| – | – | – |")
        for line in (section.splitlines())
    )


@pytest.mark.slow
def test_the_steps_top_kernel_says_its_calls_per_step_then_per_forward_pass():
    """The step scope's top kernel runs 3 times in each of the 2 steps, all in the forward
    pass: its calls per step first (not only per forward pass, which a step-scoped line
    read alone would take for the step's), then per forward pass."""
    result = _report(_two_steps(3))
    step = result.answers["answers"]["top_kernel"]["scopes"]["step"]
    assert (step["calls"], step["passes"], step["calls_per_pass"]) == (6, 2, 3)
    brief = _section(result.markdown, "Answers in brief")
    line = next(x for x in brief.splitlines() if x.startswith("- Top kernel of the 2 steps"))
    assert line.endswith("(75.0 % of its time), 3 calls per step, 3 per forward pass."), line


@pytest.mark.slow
def test_one_call_per_forward_pass_is_singular():
    """DLRM: "1 calls per forward pass"."""
    brief = _section(_report(_two_steps(1)).markdown, "Answers in brief")
    assert "1 call per forward pass" in brief and "1 calls" not in brief


@pytest.mark.corpus
def test_the_brief_names_a_copy_as_a_copy_and_the_largest_kind_of_wait(tmp_path):
    """vecAdd on a T4, 4 streams: host-to-device copies take most of the time, but the top
    kernel is a kernel and the copies have their own sentence; the busiest stream's idle
    time is mostly waiting on the other streams, which the sentence left out (it gave
    launch-bound 0 and synchronisations 0 of 12 ms idle)."""
    analyse_file(corpus_path("vecadd_streams_t4_gpu4.sqlite"), tmp_path)
    result = build_report(read_run(tmp_path))
    brief = _section(result.markdown, "Answers in brief")
    assert "- Top kernel of the whole capture: `vecAdd` (6.4 % of its time)" in brief
    copies = result.answers["answers"]["copies"]
    assert copies["rows"][0]["name"] == "[CUDA memcpy HtoD]"
    assert "- Copies and memsets (no kernels): " in brief and "[CUDA memcpy HtoD]" in brief
    top = result.answers["answers"]["waits"]["busiest"][0]
    assert top["idle_other_stream_ns"] > top["idle_ns"] / 2
    ns, share = ms(top["idle_other_stream_ns"]), pct(top["idle_other_stream_share"])
    said = f"; the largest part, {ns} ({share} of wall time), was waiting on other streams or"
    assert said + " communication." in brief


def test_a_synchronous_copy_is_not_an_operation_shorter_than_its_launch():
    """saxpy with MPI: cudaMemcpy calls wait for their copy, so every copy 'ran for less time
    than its launch call took'; only asynchronous calls can say the host was too slow."""
    f = Frames()
    for i, api in enumerate(("cudaMemcpy_v3020", "cudaMemcpyAsync_v3020")):
        f.kernel(1, 20 * i, "[CUDA memcpy HtoD]", dur=1, kind="memcpy")
        f.calls[-1].update(api_name=api, end_ns=(20 * i + 5) * MS)
    cost = analyse(f.profile()).summaries.waits["launch_cost"]
    assert cost.select(pl.col("launches", "shorter_than_launch").sum()).row(0) == (2, 1)


@pytest.mark.slow
def test_the_launch_calls_host_time_says_it_holds_synchronous_copies_waits():
    """A cudaMemcpy call lasts until its copy is done: 'the host spent X in launch calls'
    holds that wait, and says so; only the other calls are compared with their operation."""
    f = Frames()
    for i, api in enumerate(("cudaMemcpy_v3020", "cudaMemcpyAsync_v3020")):
        f.kernel(1, 20 * i, "[CUDA memcpy HtoD]", dur=1, kind="memcpy")
        f.calls[-1].update(api_name=api, end_ns=(20 * i + 5) * MS)
    result = _report(f)
    totals = result.answers["answers"]["waits"]["totals"]
    assert (totals["launches"], totals["sync_copy_calls"]) == (2, 1)
    brief = _section(result.markdown, "Answers in brief")
    assert "in 2 launch calls (1 of them synchronous copy or set, such as cudaMemcpy," in brief
    assert "of the others, 1 operation ran for less time than its launch call took." in brief


@pytest.mark.corpus
def test_saxpy_launch_calls_are_mostly_synchronous_copies(tmp_path):
    """saxpy with MPI on Perlmutter: 15 of its 20 launch calls are cudaMemcpy, waiting for
    copies of 285 ms; the host time in launch calls (374 ms) says it holds them."""
    analyse_file(corpus_path("pipit_saxpy_mpi_cuda_rank0_perlmutter.sqlite"), tmp_path)
    ops = pl.read_parquet(tmp_path / "ops.parquet", columns=["launch_api"])
    copies = ops.filter(pl.col("launch_api").str.starts_with("cudaMemcpy_")).height
    result = build_report(read_run(tmp_path))
    totals = result.answers["answers"]["waits"]["totals"]
    assert totals["sync_copy_calls"] == copies == 15 and totals["launches"] == 20
    brief = _section(result.markdown, "Answers in brief")
    assert "in 20 launch calls (15 of them synchronous copies or sets" in brief


def test_no_pass_beside_repeating_blocks_does_not_say_nothing_repeats(tmp_path):
    """saxpy: the kernel sequence repeats in blocks (100 % of GPU time in inferred blocks)
    but holds no forward or backward pass; the note on the missing pass says that, not
    "no repeating kernel sequence" beside the table of repeats."""
    analyse_file(corpus_path("pipit_saxpy_mpi_cuda_rank0_perlmutter.sqlite"), tmp_path)
    markdown = build_report(read_run(tmp_path)).markdown
    assert "## Per block, inferred from the repeating kernel sequence" in markdown
    assert "no forward or backward pass in the kernel sequence, whatever blocks" in markdown
    assert "no repeating kernel sequence" not in markdown


def test_the_terminal_names_generic_kernels_by_what_tells_them_apart():
    """mmagic: CUTLASS's `Kernel<...>` kernels of a convolution and of an SGEMM shared the
    terminal row 'Kernel (gemm)'; each is named by its template argument."""
    f = Frames()
    conv = (
        "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32>(T1::Params)"
    )
    sgemm = "void cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(T1::Params)"
    gemv = "std::enable_if<!T7, void>::type internal::gemvx::kernel<int, int, float>(T13)"
    for at, name, short in ((1, conv, "Kernel"), (5, sgemm, "Kernel"), (9, sgemm, "Kernel")):
        f.kernel(1, at, name, dur=1)
        f.ops[-1]["short_name"] = short
    f.kernel(1, 13, gemv, dur=1)
    f.ops[-1]["short_name"] = "enable_if"  # GPT-2 on B200: cuBLAS's gemv, so shortened
    report = f.profile()
    text = render_summary(summarise(attribute(report), report.ranges), {"backend": "nsys"})
    assert (
        "  cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32> (gemm)" in text
    )
    assert "  cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1> (gemm)" in text
    assert "  internal::gemvx::kernel<int…> (gemm)" in text
    assert "  Kernel (gemm)" not in text and "enable_if" not in text


@pytest.mark.slow
def test_attention_in_both_directions_needs_no_note_about_other_phases():
    """GPT-2 on B200: attention modules hold forward and backward work; that they hold no
    optimizer work says nothing, so the answer carries no coverage note."""
    f = Frames()
    for phase, at in (("forward", 0), ("backward", 20)):
        f.range(1, phase, at, at + 20)
        f.range(1, "attention", at + 1, at + 10)
        f.range(1, "softmax", at + 2, at + 5)
        f.kernel(1, at + 3, "softmax_warp_forward", dur=1)
        f.range(1, "scores matmul", at + 5, at + 9)
        f.kernel(1, at + 6, "ampere_sgemm_128x64_tn", dur=2)
    f.range(1, "optimizer", 40, 50)
    f.kernel(1, 41, "multi_tensor_apply_kernel", dur=1)
    result = _report(f)
    answer = result.answers["answers"]["softmax_vs_matmul"]
    assert answer["attention_phases"] == ["forward", "backward"]
    assert "optimizer" in answer["step_phases"]
    assert " hold" not in result.markdown


@pytest.mark.corpus
def test_nvfuser_ranges_are_not_pytorch_operator_ranges():
    """nvFuser's C++ ranges on H100 (`KernelExecutor::runFusion`,
    `ExecutorRunFusion::cuLaunchKernel`, `fusion_executor::allocations::allocateOutputs`)
    were said to be PyTorch operator ranges; PyTorch's own names still are."""
    profile = load_profile(corpus_path("nvfuser_gtest_hopper_matmul_h100.sqlite"))
    analysis = analyse(profile, infer=False)
    text = render_summary(analysis.summaries, {"backend": "nsys"})
    said = next(line for line in text.splitlines() if line.startswith("Profile: "))
    assert (
        said.startswith("Profile: user ranges; no step ranges") and "PyTorch operator" not in said
    )
    assert "`emit_nvtx` (operator ranges)" in said
    names = pl.Series(
        [
            "KernelExecutor::runFusion",
            "ExecutorRunFusion::cuLaunchKernel",
            "fusion_executor::allocations::allocateOutputs",
            "ExecutionContext::execute",
            "aten::addmm",
            "aten::_to_copy",
            "autograd::engine::evaluate_function: MmBackward0",
            "torch::autograd::AccumulateGrad",
            "fbgemm::permute_2D_sparse_data",
            "FSDP::pre_forward (blocks.0)",
            "MmBackward0",
        ]
    )
    user = pl.select(is_user_range(pl.lit(names))).to_series().to_list()
    assert user == [True] * 4 + [False] * 7
    # Nor does a kernel launched inside one get it as its operator: the brief's
    # "largest non-matmul work, by operator" listed `ExecutorRunFusion::cuLaunchKernel`.
    operators = set(analysis.ops["aten_op"].drop_nulls())
    assert not operators & set(names[:4]), operators


@pytest.mark.corpus
def test_one_steps_wall_time_is_the_steps_in_the_singular(tmp_path):
    """DLRM rank 0 of 8 (one ProfilerStep): 'Over the steps' wall time (13.009 ms, first
    start to last end per step and device)' spoke of several; one step is the step's."""
    analyse_file(corpus_path("param_dlrm_ddp_rank0of8_nccl_alltoall_v100.pt.trace.json"), tmp_path)
    result = build_report(read_run(tmp_path))
    assert result.answers["run"]["steps"] == 1
    rate = result.answers["answers"]["flop_rate"]
    said = f"Over the step's wall time ({ms(rate['step_wall_ns'])}, first start to last end per"
    assert said + " device): MFU " in result.markdown
    assert "steps' wall time" not in result.markdown


@pytest.mark.slow
def test_the_waits_tables_say_what_the_rest_of_the_idle_time_before_was():
    """GPT-2 on B200: the forward phase's 0.757 ms idle before its operations read as
    launch-bound 0.627 ms, sync 0 and other stream 0; the sentence above the table says
    what the rest is (here of unknown cause: a kernel launched in time waited 1 ms with
    nothing else running, longer than the GPU's latency)."""
    f = Frames()
    f.range(1, "step 0", 0, 90)
    f.range(1, "forward", 0, 80)
    f.kernel(1, 1, "ampere_sgemm_128x64_tn", dur=2)
    f.kernel(1, 2, "elementwise_kernel", dur=1, run_at=5)  # launched in time, ran later
    result = _report(f)
    phase = result.answers["answers"]["waits"]["phases"][0]
    said = sum(phase[f"idle_{k}_ns"] for k in ("launch", "sync", "other_stream"))
    assert phase["idle_before_ns"] > said and phase["idle_unknown_ns"] > 0
    section = _section(result.markdown, "Where the GPU waits")
    assert "the rest of the idle time before them was GPU latency, of unknown cause, or" in (
        section
    )


def test_the_terminal_says_how_many_kernels_a_short_name_stands_for():
    """pipit_cloverleaf: the terminal's top kernel `par_ranged2d_kernel` (87.9 %) stood for 36
    template instances, while report.md's top kernel was one of them
    (`par_ranged2d_kernel<PdV_kernel>`, 6.4 %); the row says how many kernels it holds."""
    f = Frames()
    names = ["void par_ranged2d_kernel<PdV_kernel>(int)", "void par_ranged2d_kernel<advec>(int)"]
    for at, name in enumerate([*names, names[0]], start=1):
        f.kernel(1, 2 * at, name, dur=1)
        f.ops[-1]["short_name"] = "par_ranged2d_kernel"
    f.kernel(1, 9, "void reduce_kernel<float>(int)", dur=1)
    f.ops[-1]["short_name"] = "reduce_kernel"
    report = f.profile()
    text = render_summary(summarise(attribute(report), report.ranges), {"backend": "nsys"})
    assert "  par_ranged2d_kernel (other, 2 kernels)" in text
    assert "  reduce_kernel (reduction)" in text  # one kernel: nothing more said
