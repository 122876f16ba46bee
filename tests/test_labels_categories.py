"""What range names say (labels) and which category a kernel falls in."""

from __future__ import annotations

import polars as pl
import pytest

from nsysmap.attribution.categories import CATEGORIES, RULES, category_expr
from nsysmap.attribution.labels import fsdp_spans, name_labels
from tests.frames import Frames

LABEL_CASES = [
    ("nsysmap:step:12", {"lbl_step": 12}),
    ("nsysmap:phase:zero_grad", {"lbl_phase": "zero_grad"}),
    (
        "nsysmap:fwd:Conv1D:transformer.h.3.attn.c_attn",
        {
            "lbl_module": "transformer.h.3.attn.c_attn",
            "lbl_module_class": "Conv1D",
            "lbl_direction": "forward",
        },
    ),
    (
        "nsysmap:bwd:GPT2LMHeadModel:",
        {"lbl_module": "", "lbl_direction": "backward", "lbl_module_class": "GPT2LMHeadModel"},
    ),
    (
        "aten::addmm, seq = 12, op_id = 5, sizes = [[8, 768], [768, 2304], []]",
        {
            "lbl_aten_op": "aten::addmm",
            "lbl_seq": 12,
            "lbl_stashed": False,
            "lbl_shapes": "[[8, 768], [768, 2304], []]",
        },
    ),
    (
        "aten::mm, stashed seq = 12",
        {
            "lbl_aten_op": "aten::mm",
            "lbl_seq": 12,
            "lbl_stashed": True,
            "lbl_direction": "backward",
        },
    ),
    ("autograd::engine::evaluate_function: AddmmBackward0", {"lbl_direction": "backward"}),
    ("aten::empty_strided, op_id = 993181", {"lbl_aten_op": "aten::empty_strided"}),
    ("flash_attn::_flash_attn_forward", {"lbl_aten_op": "flash_attn::_flash_attn_forward"}),
    ("ProfilerStep#7", {"lbl_step": 7}),
    ("Train step 3", {"lbl_step": 3}),
    ("iteration_5", {"lbl_step": 5}),
    ("Optimizer.step#AdamW.step", {"lbl_phase": "optimizer"}),
    ("Optimizer.zero_grad#AdamW.zero_grad", {"lbl_phase": "zero_grad"}),
    ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", {"lbl_phase": "data"}),
    ("Forward", {"lbl_phase": "forward"}),
    ("loss.backward", {"lbl_phase": "backward"}),
    ("FSDP forward (blocks.3)", {"lbl_module": "blocks.3", "lbl_direction": "forward"}),
    ("ncclAllReduce", {}),
    ("{'traceMarker': ['net.py:34']}", {}),
    ("nsysmap:fwd:NoPath", {}),
]


@pytest.mark.parametrize(("name", "expected"), LABEL_CASES)
def test_name_labels(name, expected):
    row = name_labels(pl.Series([name], dtype=pl.String)).row(0, named=True)
    set_labels = {k: v for k, v in row.items() if k != "name" and v is not None}
    assert set_labels == expected


def test_fsdp_pairs_each_pre_hook_with_the_next_post_hook_of_the_same_block():
    f = Frames()
    f.range(1, "FSDP::pre_forward (blocks.0), op_id = 1", 0, 1)
    f.range(1, "FSDP::pre_forward (blocks.1), op_id = 2", 2, 3)
    f.range(1, "FSDP::post_forward (blocks.1), op_id = 3", 10, 11)
    f.range(1, "FSDP::post_forward (blocks.0), op_id = 4", 12, 13)
    f.range(2, "FSDP::post_forward (blocks.0), op_id = 5", 20, 21)  # other thread
    f.range(1, "FSDP::pre_backward (blocks.0), op_id = 6", 30, 31)  # never closed
    ranges = pl.DataFrame(f.ranges, schema=f.report().ranges.schema).head(6)
    spans = fsdp_spans(ranges, first_id=100)
    got = {
        (r["name"], r["start_ns"] // 10**6, r["end_ns"] // 10**6)
        for r in spans.iter_rows(named=True)
    }
    assert got == {("FSDP forward (blocks.0)", 0, 13), ("FSDP forward (blocks.1)", 2, 11)}
    assert sorted(spans["range_id"]) == [100, 101] and set(spans["kind"]) == {"synthetic"}


CATEGORY_CASES = [
    ("kernel", "ampere_sgemm_128x64_tn", "gemm"),
    ("kernel", "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", "gemm"),
    ("kernel", "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>", "gemm"),
    (
        "kernel",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
        "gemm",
    ),
    ("kernel", "volta_scudnn_128x32_relu_interior_nn_v1", "gemm"),
    ("kernel", "flash_fwd_kernel", "attention"),
    ("kernel", "fmha_cutlassF_f32_aligned_64x64_rf_sm80", "attention"),
    (
        "kernel",
        "void at::native::softmax_warp_forward<float, float, float, 7, false, false>",
        "softmax",
    ),
    (
        "kernel",
        "void at::native::vectorized_elementwise_kernel<4, at::native::exp_kernel_cuda>",
        "softmax",
    ),
    ("kernel", "void at::native::vectorized_layer_norm_kernel<float, float>", "normalization"),
    ("kernel", "triton_per_fused_native_layer_norm_0", "normalization"),
    (
        "kernel",
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
        "elementwise",
    ),
    ("kernel", "void at::native::expand_kernel", "other"),
    ("kernel", "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "reduction"),
    (
        "kernel",
        "void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor<float, 4>>",
        "optimizer",
    ),
    ("kernel", "ncclDevKernel_SendRecv(ncclDevComm *, unsigned long, ncclWork *)", "communication"),
    ("kernel", "calcAllLowestResidualsGPU", "other"),
    (
        "kernel",
        "void fft2d_c2r_32x32<float, false>(float *, cudnn::reduced_divisor, int2)",
        "other",
    ),
    ("memcpy", "[CUDA memcpy HtoD]", "memcpy"),
    ("memset", "[CUDA memset]", "memset"),
    ("cpu_op", "aten::addmm", "gemm"),
    ("cpu_op", "aten::_softmax", "softmax"),
    ("cpu_op", "aten::native_layer_norm", "normalization"),
    ("cpu_op", "aten::add_", "elementwise"),
    ("cpu_op", "aten::sum", "reduction"),
    ("cpu_op", "aten::_fused_adamw_", "optimizer"),
    ("cpu_op", "aten::view", "other"),
    (
        "cpu_op",
        "autograd::engine::evaluate_function: BackwardHookFunctionBackward",
        "instrumentation",
    ),
    ("cpu_op", "BackwardHookFunction", "instrumentation"),
    ("cpu_op", "aten::bernoulli_", "elementwise"),
    ("cpu_op", "aten::_to_copy", "elementwise"),
]


@pytest.mark.parametrize(("kind", "name", "expected"), CATEGORY_CASES)
def test_category(kind, name, expected):
    ops = pl.DataFrame(
        {"kind": [kind], "name": [name], "short_name": [None]},
        schema={"kind": pl.String, "name": pl.String, "short_name": pl.String},
    )
    got = ops.select(category_expr(pl.col("kind"), pl.col("name"), pl.col("short_name")))
    assert got.item() == expected


def test_rules_only_name_declared_categories():
    assert {category for category, _ in RULES} <= set(CATEGORIES)
