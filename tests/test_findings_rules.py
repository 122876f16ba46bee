"""Each rule of what to fix first on a synthetic run that plants its problem, and on one that
does not (or already uses the fix): no false positive.

The runs are planned in milliseconds (tests/findings_plans.py) and analysed
by the one flow; the expected savings are worked out by hand from the plan.
Three steps each: every figure is per step.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from devtools.synth import SynthExport
from nsysmap.findings import Inputs, findings_table, job_inputs, with_findings
from nsysmap.findings.rule_table import RULES, rule
from nsysmap.flow.verbs import analyse, load_profile
from tests.findings_plans import A100 as A100_GPU
from tests.findings_plans import DTOH, HTOD, V100, K, Plan, findings_of

MS = 1_000_000
SGEMM = "ampere_sgemm_128x64_tn"
EW = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>()"
BIG = K("ampere_s1688gemm_fp16_128x128_ldg8_tn", 5.0)  # tensor-core work between the others


def found(plan: Plan, tmp_path: Path) -> pl.DataFrame:
    """findings.parquet of the planned run."""
    return findings_of(plan, tmp_path)


def of(table: pl.DataFrame, rule_id: str) -> pl.DataFrame:
    return table.filter(pl.col("rule") == rule_id)


def saving_ms(table: pl.DataFrame, rule_id: str) -> float:
    rows = of(table, rule_id)
    assert rows.height == 1, table.select("rule", "place")
    return rows["saving_ns_per_step"][0] / MS


# ---------------------------------------------------------------- fp32_gemm


def test_fp32_gemms_on_an_a100_save_the_tf32_share_of_their_time(tmp_path):
    plan = Plan([K(SGEMM, 10.0), K(SGEMM, 10.0), K(EW, 1.0)])
    table = found(plan, tmp_path)
    # 20 ms of SIMT GEMMs per step, at most 19.5 / 156 of it left with TF32
    assert saving_ms(table, "fp32_gemm") == pytest.approx(20 * (1 - 19.5 / 156))
    row = of(table, "fp32_gemm").row(0, named=True)
    assert row["upper_bound"] and "allow_tf32" in row["fix"] and row["basis_ns_per_step"] == 20 * MS


@pytest.mark.slow
def test_the_fp32_gemm_kernels_are_named_most_time_first(tmp_path):
    """The kernels that take the time lead the list, not the first by name: a 0.1 ms
    `Kernel2` GEMM is named after the 9 ms sgemm (in another module, too)."""
    small = K("cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>", 0.1)
    big = K("ampere_sgemm_64x32_sliced1x4_nt", 9.0, module=ACT)
    mid = K(SGEMM, 1.0)
    evidence = of(found(Plan([small, big, mid]), tmp_path), "fp32_gemm")["evidence"][0]
    first = evidence.index("ampere_sgemm_64x32_sliced1x4_nt")
    assert first < evidence.index(SGEMM) < evidence.index("Kernel2")


@pytest.mark.slow
def test_fp16_gemms_or_an_older_gpu_make_no_fp32_finding(tmp_path):
    tensor_cores = Plan([BIG, BIG, K(EW, 1.0)])
    assert of(found(tensor_cores, tmp_path), "fp32_gemm").is_empty()
    volta = Plan([K("volta_sgemm_128x64_tn", 10.0), K(EW, 1.0)], gpu=V100)
    assert of(found(volta, tmp_path), "fp32_gemm").is_empty()
    # cuDNN's convolutions follow cudnn.allow_tf32 (on by default), whatever their name says
    conv = "void cudnn::detail::implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1>()"
    assert of(found(Plan([K(conv, 10.0), K(EW, 1.0)]), tmp_path), "fp32_gemm").is_empty()


def test_a_gpu_missing_from_the_peaks_says_what_it_needs(tmp_path):
    plan = Plan([K(SGEMM, 10.0)], gpu=("NVIDIA GeForce RTX 5070 Laptop GPU", (12, 0)))
    row = of(found(plan, tmp_path), "fp32_gemm").row(0, named=True)
    assert row["saving_ns_per_step"] is None and "peaks" in row["needs"]


# ---------------------------------------------------------------- launch_bound

TINY = K(EW, 0.01, gap=0.05)


@pytest.mark.slow
def test_a_phase_of_tiny_late_launched_kernels_is_launch_bound(tmp_path):
    plan = Plan([BIG, *[TINY] * 50])
    table = found(plan, tmp_path)
    # 50 launch gaps of 0.05 ms per step; the forward's first one follows BIG
    assert saving_ms(table, "launch_bound") == pytest.approx(50 * 0.05, rel=1e-6)
    assert of(table, "launch_bound")["phase"].to_list() == ["forward"]


@pytest.mark.slow
def test_kernels_launched_in_time_or_after_long_host_work_are_not_launch_bound(tmp_path):
    in_time = Plan([BIG, *[K(EW, 0.01)] * 50])
    assert of(found(in_time, tmp_path), "launch_bound").is_empty()
    host_work = Plan([BIG, *[K(EW, 0.01, gap=1.0)] * 5])  # gaps longer than max_launch_gap_ns
    assert of(found(host_work, tmp_path), "launch_bound").is_empty()


def test_cuda_graph_replays_make_no_launch_bound_finding(tmp_path):
    """50 replays of a CUDA graph traced whole, each after a launch gap: the phase already
    runs graphs (and what they hold is not seen), so no launch-bound finding."""
    b = SynthExport()
    b.thread(1, 10, "python")
    b.gpu(0, A100_GPU[0], compute=A100_GPU[1])
    t = 1.0
    for step in range(3):
        b.range(1, 10, t - 0.05, t + 4.0, f"nsysmap:step:{step}")
        b.range(1, 10, t - 0.04, t + 3.9, "nsysmap:phase:forward")
        for i in range(50):
            corr = step * 100 + i + 1
            start = t + 0.05 + i * 0.06
            b.launch(1, 10, start - 0.006, start - 0.004, corr, api="cudaGraphLaunch_v10000")
            b.graph_replay(1, 0, 7, start, start + 0.01, corr, graph=1, exec_id=1)
        t += 5.0
    path = b.write(tmp_path / "graphs.sqlite")
    table = with_findings(analyse(load_profile(path))).findings
    assert table is not None and of(table, "launch_bound").is_empty()


# ---------------------------------------------------------------- per_parameter_optimizer


@pytest.mark.slow
def test_an_optimizer_of_one_kernel_per_operation_and_parameter(tmp_path):
    step = [K(SGEMM, 5.0), *[K(EW, 0.01, phase="optimizer", gap=0.02)] * 40]
    table = found(Plan(step, gpu=V100), tmp_path)
    # the 40 gaps of 0.02 ms before the optimizer's kernels (the first follows the GEMM)
    assert saving_ms(table, "per_parameter_optimizer") == pytest.approx(40 * 0.02, rel=1e-6)
    assert "fused=True" in of(table, "per_parameter_optimizer")["fix"][0]


def test_a_multi_tensor_optimizer_makes_no_per_parameter_finding(tmp_path):
    fused = K("void multi_tensor_apply_kernel<TensorListMetadata<4>>()", 0.3, phase="optimizer")
    step = [K(SGEMM, 5.0), *[K(EW, 0.01, phase="optimizer", gap=0.02)] * 40, fused]
    assert of(found(Plan(step, gpu=V100), tmp_path), "per_parameter_optimizer").is_empty()


# ---------------------------------------------------------------- unfused_attention

ATTN = ("transformer.h.0.attn", "GPT2Attention")


@pytest.mark.slow
def test_attention_with_a_softmax_kernel_of_its_own_is_unfused(tmp_path):
    step = [
        K("volta_sgemm_64x64_nt", 2.0, module=ATTN),
        K("void softmax_warp_forward<float>()", 1.0, module=ATTN),
        K(EW, 0.5, module=ATTN),
        K("volta_sgemm_64x64_nn", 2.0, module=ATTN),
    ]
    table = found(Plan(step, gpu=V100), tmp_path)
    assert saving_ms(table, "unfused_attention") == pytest.approx(1.5)
    assert of(table, "unfused_attention")["module"].to_list() == ["transformer.h.*.attn"]
    # the softmax named is the softmax kernels' time, and says so (not a softmax range's)
    evidence = of(table, "unfused_attention")["evidence"][0]
    assert "softmax kernels 1.000 ms, other non-matmul work 0.500 ms" in evidence
    # the fix keeps the model's own mask: causal only where the model masks so (an
    # encoder's attention masks nothing; is_causal=True would change its results)
    fix = of(table, "unfused_attention")["fix"][0]
    assert "scaled_dot_product_attention(q, k, v) in place of" in fix
    assert "is_causal=True for a causal (decoder) mask" in fix and "neither where" in fix


def test_fused_attention_makes_no_finding(tmp_path):
    step = [K("flash_fwd_kernel", 2.0, module=ATTN), K(EW, 0.5, module=ATTN)]
    assert of(found(Plan(step, gpu=V100), tmp_path), "unfused_attention").is_empty()


# ---------------------------------------------------------------- host_sync and sync_copy


@pytest.mark.slow
def test_a_synchronisation_inside_the_step_and_the_copy_before_it(tmp_path):
    step = [
        K(SGEMM, 5.0),
        K("[CUDA memcpy DtoH]", 0.01, copy=DTOH, under="aten::_local_scalar_dense"),
        K(SGEMM, 5.0, gap=2.0, sync=True),
    ]
    table = found(Plan(step, gpu=V100), tmp_path)
    assert saving_ms(table, "host_sync") == pytest.approx(2.0)
    assert "aten::_local_scalar_dense" in of(table, "host_sync")["evidence"][0]


def test_a_gap_without_synchronisation_is_no_host_sync(tmp_path):
    step = [K(SGEMM, 5.0), K(SGEMM, 5.0, gap=2.0)]
    assert of(found(Plan(step, gpu=V100), tmp_path), "host_sync").is_empty()


def test_synchronous_host_to_device_copies_in_the_step(tmp_path):
    copy = K("[CUDA memcpy HtoD]", 1.0, phase="data", copy=HTOD, api="cudaMemcpy_v3020")
    table = found(Plan([copy, K(SGEMM, 5.0)], gpu=V100), tmp_path)
    assert saving_ms(table, "sync_copy") == pytest.approx(1.0)


def test_asynchronous_copies_make_no_sync_copy_finding(tmp_path):
    copy = K("[CUDA memcpy HtoD]", 1.0, phase="data", copy=HTOD)  # cudaMemcpyAsync
    assert of(found(Plan([copy, K(SGEMM, 5.0)], gpu=V100), tmp_path), "sync_copy").is_empty()


# ---------------------------------------------------------------- exposed_communication

ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


@pytest.mark.slow
def test_an_all_reduce_after_the_backward_is_exposed(tmp_path):
    step = [
        K(SGEMM, 4.0, phase="backward"),
        K(ALL_REDUCE, 3.0, phase="backward", stream=20, at=4.5),
    ]
    table = found(Plan(step, gpu=V100), tmp_path)
    assert saving_ms(table, "exposed_communication") == pytest.approx(3.0)
    row = of(table, "exposed_communication").row(0, named=True)
    assert row["phase"] == "backward" and "bucket_cap_mb" in row["fix"]


@pytest.mark.slow
def test_an_all_reduce_under_compute_is_hidden(tmp_path):
    step = [
        K(SGEMM, 4.0, phase="backward"),
        K(ALL_REDUCE, 3.0, phase="backward", stream=20, at=0.5),
    ]
    assert of(found(Plan(step, gpu=V100), tmp_path), "exposed_communication").is_empty()


# ---------------------------------------------------------------- elementwise_chain

ACT = ("transformer.h.0.mlp.act", "NewGELUActivation")


@pytest.mark.slow
def test_a_chain_of_short_elementwise_kernels_in_one_module(tmp_path):
    step = [K(SGEMM, 1.0), *[K(EW, 0.01, module=ACT, gap=0.01)] * 8]
    table = found(Plan(step, gpu=V100), tmp_path)
    # 7 gaps of 0.01 ms inside the chain, and 7/8 of its 0.08 ms
    assert saving_ms(table, "elementwise_chain") == pytest.approx(7 * 0.01 + 0.08 * 7 / 8)


@pytest.mark.slow
def test_host_work_inside_a_chain_is_no_saving_of_fusion(tmp_path):
    """The same chain with a 2 ms gap (host work, above LAUNCH_GAP) before its fifth
    kernel: one fused kernel does not shorten it, so it is no part of the saving."""
    chain = [K(EW, 0.01, module=ACT, gap=0.01)] * 8
    chain[4] = K(EW, 0.01, module=ACT, gap=2.0)
    table = found(Plan([K(SGEMM, 1.0), *chain], gpu=V100), tmp_path)
    assert saving_ms(table, "elementwise_chain") == pytest.approx(6 * 0.01 + 0.08 * 7 / 8)
    evidence = of(table, "elementwise_chain")["evidence"][0]
    assert "with 0.060 ms of launch gaps between them" in evidence


@pytest.mark.slow
def test_a_fused_kernel_or_a_short_run_is_no_chain(tmp_path):
    compiled = [K(SGEMM, 1.0), K("triton_poi_fused_gelu_0", 0.02, module=ACT)]
    assert of(found(Plan(compiled, gpu=V100), tmp_path), "elementwise_chain").is_empty()
    short = [K(SGEMM, 1.0), *[K(EW, 0.01, module=ACT, gap=0.01)] * 3]
    assert of(found(Plan(short, gpu=V100), tmp_path), "elementwise_chain").is_empty()


# ---------------------------------------------------------------- data_wait

BATCH = K("[CUDA memcpy HtoD]", 0.1, phase="data", copy=HTOD)


@pytest.mark.slow
def test_the_gpu_waiting_for_each_batch_between_steps(tmp_path):
    plan = Plan([BATCH, K(SGEMM, 5.0)], between=5.0, gpu=V100)
    # two gaps of 5 ms between three steps, per measured step
    assert saving_ms(found(plan, tmp_path), "data_wait") == pytest.approx(10 / 3, rel=1e-6)


@pytest.mark.slow
def test_steps_back_to_back_or_without_a_data_phase_make_no_data_finding(tmp_path):
    fed = Plan([BATCH, K(SGEMM, 5.0)], between=0.01, gpu=V100)
    assert of(found(fed, tmp_path), "data_wait").is_empty()
    unknown = Plan([K(SGEMM, 5.0)], between=5.0, gpu=V100)  # no data phase: cannot tell
    assert of(found(unknown, tmp_path), "data_wait").is_empty()


# ---------------------------------------------------------------- straggler


def _job(costs: list[int]) -> Inputs:
    """The job of two ranks over len(costs) steps, rank 1 computing longer and rank 0
    waiting `costs[i]` ns in step i; rank 1 is slow in `transformer.h.1`."""
    n = len(costs)
    steps = pl.DataFrame(
        {
            "step": list(range(n)),
            "ranks": [2] * n,
            "slowest_rank": [1] * n,
            "fastest_rank": [0] * n,
            "straggler_cost_ns": costs,
        }
    )
    rank_steps = pl.DataFrame({"rank": [0, 1] * n, "step": [s for s in range(n) for _ in (0, 1)]})
    rank_steps = rank_steps.with_columns(span_ns=pl.lit(20 * MS))
    modules = pl.DataFrame(
        {
            "module": ["transformer.h.1", "transformer.h.0"],
            "module_class": ["GPT2Block"] * 2,
            "phase": ["forward"] * 2,
            "slowest_rank": [1, 0],
            "excess_ns": [3.0 * MS * n, 0.1 * MS * n],
        }
    )
    across = {"stragglers": steps, "rank_steps": rank_steps, "rank_module_phase": modules}
    return job_inputs(across, ())


def test_the_rank_others_wait_for_and_its_slow_layer():
    table = findings_table([_job([2 * MS, 2 * MS, 2 * MS])])
    row = of(table, "straggler").row(0, named=True)
    assert row["rank"] == 1 and row["module"] == "transformer.h.1"
    assert row["saving_ns_per_step"] == 2 * MS and row["saving_share"] == pytest.approx(0.1)


def test_ranks_that_wait_for_nobody_make_no_straggler_finding():
    assert findings_table([_job([0, 0, 0])]).is_empty()


# ---------------------------------------------------------------- the rules as data


def test_every_rule_has_documented_thresholds_and_a_section_in_the_docs():
    docs = (Path(__file__).parents[1] / "docs" / "findings.md").read_text()
    assert len(RULES) == 10 and len({r.id for r in RULES}) == 10
    for r in RULES:
        assert f"### `{r.id}`" in docs, r.id
        for t in r.thresholds:
            assert f"`{t.name}`" in docs and t.meaning, (r.id, t.name)
        assert rule(r.id) is r and r.doc == f"docs/findings.md#{r.id}"
