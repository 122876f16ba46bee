"""What range names say (labels) and which category a kernel falls in."""

from __future__ import annotations

import polars as pl
import pytest

from nsysmap.attribution.categories import CATEGORIES, RULES, category_expr
from nsysmap.attribution.labels import (
    AUTOGRAD_NODE,
    SIZES,
    autograd_nodes,
    fsdp_spans,
    name_labels,
    shapes,
)
from tests.corpus import CORPUS, connect
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
    # Other libraries' C++ functions are not operators (labels.OPERATOR_RANGE).
    ("KernelExecutor::runFusion", {}),
    ("fusion_executor::allocations::allocateOutputs", {}),
]


@pytest.mark.parametrize(("name", "expected"), LABEL_CASES)
def test_name_labels(name, expected):
    row = name_labels(pl.Series([name], dtype=pl.String)).row(0, named=True)
    set_labels = {k: v for k, v in row.items() if k != "name" and v is not None}
    assert set_labels == expected


@pytest.mark.slow
def test_names_together_get_the_labels_each_gets_alone():
    """Operators are tested once per distinct operator over a series of names: each row
    must still get the labels its own name gives."""
    names = [name for name, _ in LABEL_CASES] * 2
    together = name_labels(pl.Series(names, dtype=pl.String))
    alone = [name_labels(pl.Series([n], dtype=pl.String)).row(0) for n in names]
    assert together.rows() == alone
    operators = name_labels(pl.Series(names), ["lbl_aten_op", "lbl_direction"])
    assert operators["lbl_aten_op"].to_list() == together["lbl_aten_op"].to_list()


def test_fsdp_pairs_each_pre_hook_with_the_next_post_hook_of_the_same_block():
    f = Frames()
    f.range(1, "FSDP::pre_forward (blocks.0), op_id = 1", 0, 1)
    f.range(1, "FSDP::pre_forward (blocks.1), op_id = 2", 2, 3)
    f.range(1, "FSDP::post_forward (blocks.1), op_id = 3", 10, 11)
    f.range(1, "FSDP::post_forward (blocks.0), op_id = 4", 12, 13)
    f.range(2, "FSDP::post_forward (blocks.0), op_id = 5", 20, 21)  # other thread
    f.range(1, "FSDP::pre_backward (blocks.0), op_id = 6", 30, 31)  # never closed
    ranges = pl.DataFrame(f.ranges, schema=f.profile().ranges.schema).head(6)
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
        "convolution",  # not a reduction: the argument list is ignored
    ),
    (
        "kernel",
        "void at::native::(anonymous namespace)::convert_indices_from_coo_to_csr_cuda_kernel"
        "<int, long>(int *, const long *, long, long)",
        "other",  # "convert" is not a convolution
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


_CNN = "nsys/dlprof_pytorch_small_cnn_rtx2070.sqlite"
_MMAGIC = "real2/mmagic_vsr_pyprof_dict_nvtx_markers_a100.sqlite"
# (kind, name or the start of a demangled name, category, corpus file it comes from).
# Convolutions run as GEMMs (implicit or explicit): GEMM kernels, matrix multiplication work.
CONVOLUTION_GEMM_CASES = [
    ("kernel", "void cudnn::detail::implicit_convolve_sgemm<float, float, (int)1024", _CNN),
    ("kernel", "void cudnn::detail::explicit_convolve_sgemm<float, int, (int)1024", _CNN),
    ("kernel", "volta_scudnn_128x32_relu_interior_nn_v1", _CNN),
    ("kernel", "volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", _CNN),
    ("kernel", "void cutlass::conv::kernel::ImplicitGemmConvolution<cutlass::conv::x>", None),
    ("kernel", "cutlass_tensorop_s1688fprop_optimized_tf32_64x64_16x10_nhwc_align4", None),
    ("kernel", "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw", None),
    ("kernel", "sm86_xmma_dgrad_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nhwc", None),
    ("kernel", "turing_fp16_s1688cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1", None),
    (
        "kernel",
        "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_64x64_32x5",
        _MMAGIC,
    ),
]
CONVOLUTION_CASES = [
    ("kernel", "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>", _CNN),
    ("kernel", "void cudnn::winograd::generateWinogradTilesKernel<(int)0, float, float>", _CNN),
    ("kernel", "void fft2d_r2c_32x32<float, (bool)0, (unsigned int)0, (bool)0>", _CNN),
    ("kernel", "void im2col4d_kernel<float, int>(im2col4d_params, cudnnConvolutionStruct", _CNN),
    ("kernel", "void flip_filter<float, float>(T2 *, const T1 *, int, int, int, int)", _CNN),
    ("kernel", "void deformable_im2col_gpu_kernel<float>(int, const T1 *, const T1 *", _MMAGIC),
    ("kernel", "cudnn::gemm::computeOffsetsKernel(cudnn::gemm::ComputeOffsetsParams)", _CNN),
    ("kernel", "void cudnn::detail::dgrad_engine<float, 128, 6, 7, 3, 3, 5, false>", None),
    ("kernel", "void cudnn::detail::wgrad_alg0_engine<float, 128, 6, 8, 3, 3, 5, false>", None),
    ("kernel", "void cudnn::detail::dgrad2d_alg1_1<float, 0, 4, 6, 3, 2, 4, false, true>", None),
    ("kernel", "void at::native::conv_depthwise2d_forward_kernel<0, float, int>", None),
    ("cpu_op", "aten::conv2d", None),
    ("cpu_op", "aten::cudnn_convolution", None),
    ("cpu_op", "aten::convolution_backward", None),
    ("cpu_op", "aten::_conv_depthwise2d", None),
]
LAYOUT_CASES = [
    ("kernel", "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, 2>", None),
    ("kernel", "void cudnn::ops::nhwcToNchwKernel<float, float, float, true, false, 0>", None),
    ("kernel", "void nchwToNhwcKernel<__half, __half, float, true, false, 0>", None),
]
CNN_CASES = [(k, n, "convolution", s) for k, n, s in CONVOLUTION_CASES]
CNN_CASES += [(k, n, "layout", s) for k, n, s in LAYOUT_CASES]
CNN_CASES += [(k, n, "gemm", s) for k, n, s in CONVOLUTION_GEMM_CASES]
CNN_CASES += [("kernel", "void gemmSN_NN_kernel<float, (int)128, (int)2, (int)4", "gemm", _CNN)]


@pytest.mark.parametrize(("kind", "name", "expected", "source"), CNN_CASES)
def test_convolution_and_layout_kernels(kind, name, expected, source):
    test_category(kind, name, expected)


def _kernel_names(source: str) -> list[str]:
    path = CORPUS.parent / source
    if not path.is_file():
        pytest.skip(f"{source} is not in the corpus at {CORPUS.parent}")
    query = (
        "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName"
    )
    with connect(path) as conn:
        return [row[0].decode() for row in conn.execute(query)]


@pytest.mark.corpus
@pytest.mark.parametrize(("name", "source"), [(n, s) for _, n, _, s in CNN_CASES if s])
def test_real_kernel_examples_occur_in_their_profile(name, source):
    assert any(kernel.startswith(name) for kernel in _kernel_names(source))


def test_rules_only_name_declared_categories():
    assert {category for category, _ in RULES} <= set(CATEGORIES)


def test_autograd_nodes_are_the_names_autograds_expression_matches():
    """autograd_nodes runs AUTOGRAD_NODE only on names holding "Backward": it must find
    exactly what the expression finds over every name."""
    names = pl.Series(
        [
            "autograd::engine::evaluate_function: MmBackward0",
            "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
            "MmBackward0",
            "MmBackward0, seq = 3",
            "NativeLayerNormBackward",
            "Backward0",  # no name before Backward
            "MmBackwardX",  # Backward inside a longer word
            " MmBackward0",
            "ΔBackward1",
            "aten::mm, stashed seq = 12, op_id = 4",
            "aten::mm, seq = 12, op_id = 4",
            "nsysmap:bwd:Linear:h.0.mlp",
            "my Backward pass",
            "x::autograd::engine::evaluate_function: MmBackward0",
            None,
            "",
        ]
    )
    expected = names.str.contains(AUTOGRAD_NODE).fill_null(False)
    assert autograd_nodes(names).to_list() == expected.to_list()
    assert 0 < expected.sum() < names.len() - 1


_SHAPE_NAMES = [
    "aten::addmm, seq = 12, op_id = 88, sizes = [[768], [2048, 768], [768, 768]]",
    "aten::mm, sizes = [[1, 2]], input_op_ids = [(88976,0), (88977,0)]",
    "sizes = [[3], []]",  # the field first
    "é::op, sizes = [[4]]",  # a multi-byte character before the field
    "aten::cat, sizes = [[[1, 2], [3]]]",  # a tensor list's shapes
    "aten::x, sizes = [[[[1]]]], sizes = [[5]]",  # too deep at first: the later field
    "xsizes = [[1]], sizes = [[6]]",  # not a field at first: the later one
    "aten::y, sizes = [unclosed",
    "aten::z,sizes = [[7]]",  # no space: no field
    "aten::mm, stashed seq = 3, op_id = 9",
    "",
    None,
]


@pytest.mark.parametrize("repeat", [1, 3])
def test_shapes_per_distinct_field_equal_the_expression_on_every_name(repeat):
    """`shapes` runs SIZES once per distinct text from the first sizes field on: the
    same answers as the expression on every name, fields that fail to match included."""
    names = pl.Series("name", _SHAPE_NAMES * repeat, dtype=pl.String)
    expected = names.str.extract(SIZES, 1)
    assert expected.drop_nulls().len() == 7 * repeat  # the cases above do match
    got = shapes(names)
    assert got.dtype == pl.String
    assert got.to_list() == expected.to_list()
    labels = name_labels(names, ["lbl_aten_op", "lbl_shapes"])
    assert labels["lbl_shapes"].to_list() == expected.to_list()
