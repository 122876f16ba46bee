"""Kernel categories on the names current stacks give their kernels.

`KERNELS` lists names with the category each should get and where the name
comes from: a file of ../shared/corpus (the name, or the start of a demangled
name, occurs there: checked below) or the project whose kernel it is. Every
rule of `nsysmap.attribution.categories.RULES` is the first match of at least
one of them, so a rule that stops matching, or a reordering that lets another
rule win, fails here.
"""

from __future__ import annotations

import gzip
import json
from functools import cache

import polars as pl
import pytest

from nsysmap.attribution.categories import RULES, category_expr, rule_text
from nsysmap.flow.verbs import analyse_file
from tests.corpus import connect, corpus_path

_VLLM = "tracelens_vllm_gptoss_fullgraph_decode_hipgraph_mi300x.json.gz"
_MOE = "tracelens_moe_topk_expert_ffn_nvjet_sm103_b300.json.gz"
_GPT2 = "aiperf_hf_gpt2_train_step_with_modules_stack_b200.json"
_SWITCH = "switchtransformer_moe_fwd_with_modules_a100.json"
_ALEXNET = "hta_param_alexnet_warmup_measure_annotations_a100.json.gz"
_DLRM = "param_dlrm_ddp_rank0of8_nccl_alltoall_v100.pt.trace.json"
_BERT = "tracelens_bert_small_infer_modules_h100.json.gz"
_TIMESFORMER = "tracelens_timesformer_infer_modules_h100.json.gz"
_DDP = "hta_ddp_ns_resolution_rank0_v100.json.gz"
_RECSYS = "hta_recsys_shapes_rank0_a100.json.gz"
_CS336 = "cs336a2_small_fwdbwd_emitnvtx_shapes_a100.sqlite"
_FASTVIDEO = "fastvideo_training_mfu_h100x2_before.sqlite"
_NVFUSER = "nvfuser_gtest_hopper_matmul_h100.sqlite"
_CUPY = "gtls_cupy_23k_kernels_rtx3060.sqlite"
_CNN = "dlprof_pytorch_small_cnn_rtx2070.sqlite"
_SOURCES = (_VLLM, _MOE, _GPT2, _SWITCH, _ALEXNET, _DLRM, _BERT, _TIMESFORMER, _DDP)
_SOURCES += (_RECSYS, _CS336, _FASTVIDEO, _NVFUSER, _CUPY, _CNN)
_TRTLLM = "TensorRT-LLM / FlashInfer trtllm-gen batched GEMM"

# (name or start of a demangled name, category, corpus file or the project it comes from)
KERNELS = [
    # cuBLAS / cuBLASLt, and the kernels it launches for one matmul call
    ("ampere_sgemm_128x64_tn", "gemm", _CS336),
    ("volta_sgemm_64x64_nt", "gemm", _DDP),
    (
        "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize96x128x32_stage4_warpsize2x2x1",
        "gemm",
        "cuBLAS",
    ),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1", "gemm", _BERT),
    ("sm100_xmma_gemm_bf16f16_bf16f16_bf16f32_tn_n_tilesize256x128x64_stage4", "gemm", "cuBLAS"),
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", "gemm", _FASTVIDEO),
    ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN", "gemm", _NVFUSER),
    ("nvjet_sm103_tst_256x8_64x6_4x1_v_bz_NNT", "gemm", _MOE),
    ("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 6, 7, false", "gemm", _GPT2),
    ("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float", "gemm", _GPT2),
    ("void gemvNSP_kernel<float, float, float, float, 1, 16, 4, 1024, false", "gemm", _DLRM),
    ("void dot_kernel<float, 128, 0, cublasDotParams<", "gemm", _DLRM),
    ("void splitKreduce_kernel<32, 16, int, float, float, float, float, true, true", "gemm", _DLRM),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float", "gemm", _GPT2),
    ("void epilogue::impl::globalKernel<float, float, float, true, true>", "gemm", _ALEXNET),
    # CUTLASS 2.x / 3.x, magma
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nn_align1>", "gemm", _GPT2),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>", "gemm", _RECSYS),
    ("cutlass3x_sm100_simt_sgemm_f32_f32_f32_f32_f32_32x32x16_1x1x1_3_ntn_align1", "gemm", _GPT2),
    (
        "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x128x64_2x1x1_0_tnt_align8",
        "gemm",
        "CUTLASS",
    ),
    ("void magma_sgemmEx_kernel<float, float, float, false, false, 6, 3, 5, 3, 3>", "gemm", _GPT2),
    # ROCm: hipBLASLt / Tensile, vLLM's skinny GEMM
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT32x32x256_MI16x16x1_SN_LDSB1", "gemm", _VLLM),
    ("void wvSplitK_hf_sml_<__hip_bfloat16, 64, 4, 16, 8, 1, 4>", "gemm", "vLLM (ROCm)"),
    # grouped, fp8 and fp4 GEMMs
    (
        "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_Ab32_Bb32_Cb32_t128x128x256u2_s4x4x4x4x1x4_et128x32",
        "gemm",
        _TRTLLM,
    ),
    (
        "bmm_Bfloat16_MxE2m1MxE4m3_Fp32_Ab32_Bb32_t128x8x256_s4_et128x8_m128x8x32_c1x1x1",
        "gemm",
        _TRTLLM,
    ),
    ("bmm_Bfloat16_E4m3E4m3_Fp32_t128x16x128u2_s6_et64x16_m64x16x32_c1x1x1_rM_TN", "gemm", _TRTLLM),
    ("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu", "gemm", _VLLM),
    ("_finalize_matmul_scatter_bf16", "gemm", _VLLM),  # matmul_ogs's epilogue kernel
    ("fused_moe_kernel", "gemm", "vLLM (Triton fused MoE)"),
    ("void marlin::Marlin<(long)1125899906910725, (long)1125899906843648", "gemm", "vLLM Marlin"),
    ("aiter::fmoe_bf16_blockscaleFp8", "gemm", "aiter"),
    (
        "void deep_gemm::sm90_fp8_gemm_1d2d_impl<(cute::UMMA::Major)0, 0u, 4096u, 1024u",
        "gemm",
        "DeepGEMM",
    ),
    # TorchInductor: GEMM templates, FlexAttention, fused kernels named after what they fuse
    ("triton_tem_fused_mm_t_view_14", "gemm", "TorchInductor"),
    ("triton_tem_fused_addmm_native_layer_norm_view_1", "gemm", "TorchInductor"),
    ("triton_tem_fused_0", "attention", "TorchInductor FlexAttention"),
    ("triton_per_fused__softmax_3", "softmax", "TorchInductor"),
    ("triton_per_fused_native_layer_norm_0", "normalization", "TorchInductor"),
    ("triton_poi_fused_constant_pad_nd_moe_forward_0", "elementwise", _VLLM),
    ("triton_poi_fused_convolution_0", "elementwise", "TorchInductor"),
    ("triton_per_fused_addmm_mean_0", "reduction", "TorchInductor"),
    # convolutions and the layout transforms around them
    ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true", "layout", _ALEXNET),
    # a convolution run as an implicit or explicit GEMM is a GEMM; its offset tables are not
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw", "gemm", _ALEXNET),
    ("void cudnn::detail::implicit_convolve_sgemm<float, float, (int)1024", "gemm", _CNN),
    ("void cask_cudnn_infer::computeOffsetsKernel<false, false>", "convolution", _DDP),
    ("igemm_fwd_gtcx_nhwc_fp32_bx0_bt64x64x16", "gemm", "MIOpen"),
    # attention
    (
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64",
        "attention",
        _BERT,
    ),
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128", "attention", _FASTVIDEO),
    ("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", "attention", "FlashAttention 2"),
    (
        "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<"
        "flash::CollectiveMainloopFwdSm90<2",
        "attention",
        "FlashAttention 3",
    ),
    (
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x",
        "attention",
        "cuDNN",
    ),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80", "attention", "PyTorch"),
    ("fmha_cutlassB_f32_aligned_64x64_k128_sm80", "attention", "PyTorch"),
    (
        "void attention_kernel_batched_impl<AttentionKernel<cutlass::half_t>>",
        "attention",
        "xFormers",
    ),
    ("kernel_unified_attention_3d", "attention", _VLLM),
    ("void vllm::paged_attention_v2_kernel<", "attention", "vLLM"),
    ("_fwd_kernel", "attention", "vLLM (Triton prefix prefill)"),
    ("_attn_fwd", "attention", "Triton"),
    (
        "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<",
        "attention",
        "FlashInfer",
    ),
    (
        "void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16, __hip_bfloat16",
        "elementwise",
        _VLLM,
    ),
    ("void vllm::concat_and_cache_mla_kernel<", "elementwise", "vLLM"),
    # communication
    (
        "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)",
        "communication",
        _FASTVIDEO,
    ),
    (
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        "communication",
        _DLRM,
    ),
    ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", "communication", "RCCL"),
    ("multimem_one_shot_all_reduce_kernel", "communication", "PyTorch symmetric memory"),
    ("two_shot_all_reduce_kernel<", "communication", "PyTorch symmetric memory"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>", "communication", "vLLM"),
    ("void deep_ep::intranode::dispatch<(int)2, (int)768, (int)8192>", "communication", "DeepEP"),
    # optimizer
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<", "optimizer", _GPT2),
    # softmax
    (
        "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16",
        "softmax",
        _MOE,
    ),
    (
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16",
        "softmax",
        _TIMESFORMER,
    ),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float", "softmax", _GPT2),
    # normalization
    (
        "void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float",
        "normalization",
        _GPT2,
    ),
    (
        "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<",
        "normalization",
        _GPT2,
    ),
    (
        "void at::native::(anonymous namespace)::LayerNormForwardCUDAKernel<float",
        "normalization",
        _GPT2,
    ),
    ("ComputeFusedParamsCUDAKernel<float>", "normalization", "PyTorch group norm"),
    (
        "_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePass",
        "normalization",
        _VLLM,
    ),
    ("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>", "normalization", "vLLM"),
    (
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>",
        "normalization",
        _DDP,
    ),
    # MoE routing
    ("_combined_routing_compute", "routing", _VLLM),
    ("_sum_bitmatrix_rows", "routing", _VLLM),
    ("void vllm::moe::topkGatingSoftmax", "routing", "vLLM"),
    ("void moe_align_block_size_kernel<int>", "routing", "vLLM / SGLang"),
    ("void moe::dev::routing::routingCustom::routingIndicesBlockKernel<", "routing", _TRTLLM),
    # top-k and sort
    ("void at::native::sbtopk::gatherTopK<c10::BFloat16, unsigned int, 2, false>", "sort", _MOE),
    ("void at::native::bitonicSortKVInPlace<2, -1, 16, 16, c10::BFloat16, long", "sort", _MOE),
    ("_topk_forward", "sort", _VLLM),
    ("void cub::DeviceRadixSortOnesweepKernel<", "sort", _RECSYS),
    ("void cub::DeviceMergeSortMergeKernel<(bool)0", "sort", _CUPY),
    # elementwise, reduction, and what no rule claims
    ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>", "elementwise", _VLLM),
    (
        "void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>",
        "elementwise",
        "vLLM",
    ),
    (
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<",
        "elementwise",
        _SWITCH,
    ),
    (
        "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float",
        "elementwise",
        _ALEXNET,
    ),
    ("void at::native::triu_tril_kernel<float, int, false, 2, false>", "elementwise", _SWITCH),
    (
        "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16",
        "reduction",
        _MOE,
    ),
    ("void cub::DeviceScanKernel<", "reduction", _RECSYS),
    (
        "void fbgemm_gpu::permute_2D_data_kernel<false, int, int, decltype(nullptr)>",
        "other",
        _RECSYS,
    ),
    (
        "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>",
        "other",
        _ALEXNET,
    ),
]
# CPU operators (torch.profiler traces categorise them with the same rules)
OPERATORS = [
    ("aten::_scaled_mm", "gemm"),
    ("aten::matmul", "gemm"),
    ("aten::_grouped_mm", "gemm"),
    ("aten::topk", "sort"),
    ("aten::sort", "sort"),
    ("aten::scaled_dot_product_attention", "attention"),
    ("autograd::engine::evaluate_function: BackwardHookFunctionBackward", "instrumentation"),
]


def _categories(kind: str, names: list[str]) -> list[str]:
    ops = pl.DataFrame({"kind": kind, "name": names, "short_name": None})
    ops = ops.cast({"short_name": pl.String})
    got = ops.select(category_expr(pl.col("kind"), pl.col("name"), pl.col("short_name")))
    return got.to_series().to_list()


@pytest.mark.slow
@pytest.mark.parametrize(("name", "expected", "source"), KERNELS)
def test_kernel_category(name, expected, source):
    assert _categories("kernel", [name]) == [expected]


@pytest.mark.parametrize(("name", "expected"), OPERATORS)
def test_operator_category(name, expected):
    assert _categories("cpu_op", [name]) == [expected]


def test_every_rule_decides_some_listed_name():
    names = [name for name, _, _ in KERNELS] + [name for name, _ in OPERATORS]
    frame = pl.DataFrame({"name": names})
    text = frame.select(rule_text(pl.col("name"), pl.lit(None, pl.String))).to_series()
    first = [None] * len(names)
    for index, (_, pattern) in reversed(list(enumerate(RULES))):
        hits = text.str.contains(f"(?i){pattern}").to_list()
        first = [index if hit else was for hit, was in zip(hits, first, strict=True)]
    undecided = [RULES[i] for i in range(len(RULES)) if i not in first]
    assert not undecided


@cache
def _corpus_kernel_names(source: str) -> frozenset[str]:
    path = corpus_path(source)
    if path.suffix == ".sqlite":
        query = (
            "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName"
        )
        with connect(path) as conn:
            return frozenset(row[0].decode() for row in conn.execute(query))
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return frozenset(e["name"] for e in events if e.get("cat") == "kernel")


@pytest.mark.corpus
@pytest.mark.parametrize(
    ("name", "source"), [(name, source) for name, _, source in KERNELS if source in _SOURCES]
)
def test_corpus_examples_occur_in_their_profile(name, source):
    assert any(kernel.startswith(name) for kernel in _corpus_kernel_names(source))


# Written apart from the rules: what names a GEMM, whatever the library.
GEMM_NAME = r"(?i)gemm|gemv|matmul|nvjet|cutlass|xmma|^cijk_|^bmm_|^void marlin::"
MATMUL_CATEGORIES = {"gemm", "attention"}


@pytest.mark.corpus
@pytest.mark.parametrize("source", [_VLLM, _MOE, _GPT2])
def test_no_large_gemm_kernel_falls_outside_the_matmul_categories(source, tmp_path):
    analysis = analyse_file(corpus_path(source), tmp_path / "out")
    kernels = analysis.summaries.by_kernel.filter(
        (pl.col("kind") == "kernel") & (pl.col("time_share") > 0.01)
    )
    gemms = kernels.filter(pl.col("name").str.contains(GEMM_NAME))
    assert gemms.height >= 2  # the check is not vacuous
    outside = gemms.filter(~pl.col("category").is_in(MATMUL_CATEGORIES))
    assert outside.select("name", "category").rows() == []
