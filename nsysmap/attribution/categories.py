"""Kernel and operator categories, as data.

`RULES` is an ordered table: the first pattern that matches an operation's
name (demangled name without its argument list, then the short name,
case-insensitive) gives its category; memcpy and memset operations and CUDA
graph replays are categorised by kind. Anything unmatched is `other`, so
unknown kernels stay visible. docs/outputs.md lists the table.

The order is deliberate; each block says why it comes where it does:

1. profiling overhead, communication and optimizer kernels, whose names
   say what they do whatever else they mention (`allreduce_fusion` fuses an
   RMS norm, `gemm_one_shot_all_reduce` a GEMM);
2. kernels that TorchInductor generates, named `triton_<kind>_fused_<ops>`
   after the operators they fuse: a pointwise kernel named after the addmm,
   attention or convolution whose output it post-processes is elementwise
   work, and a GEMM template with a fused layer-norm epilogue is a GEMM;
3. KV-cache writes (vLLM's `reshape_and_cache_flash`): copies, before the
   attention rule their names would match;
4. MoE routing, before softmax and GEMM (`topkGatingSoftmax`);
5. attention, then softmax and normalization, then layout transforms and
   convolutions, before GEMM: fused attention runs GEMMs underneath, but the
   work is the attention (the report's matmul share counts it); a
   convolution run as a GEMM (implicit or explicit) is a gemm kernel, the
   convolution's other kernels (FFT, Winograd transforms, im2col, direct and
   depthwise kernels) are convolution;
6. GEMM libraries (cuBLAS/cuBLASLt, CUTLASS, hipBLASLt/Tensile, TensorRT-LLM,
   Triton matmuls, Marlin) and every kernel they launch for one matmul call
   (cuBLAS split-K reduction, cuBLASLt epilogue, matmul_ogs's finalize);
7. top-k and sort, before reduction (CUB) and elementwise (`gatherTopK`);
8. the generic reduction and elementwise kernels last.
"""

from __future__ import annotations

import polars as pl

CATEGORIES = (
    "gemm",
    "attention",
    "softmax",
    "normalization",
    "convolution",
    "layout",
    "routing",
    "sort",
    "elementwise",
    "reduction",
    "optimizer",
    "memcpy",
    "memset",
    "communication",
    "graph",
    "instrumentation",
    "other",
)

# A demangled name's trailing "(int, float *, ...)", one level of nested parentheses allowed.
TRAILING_ARGUMENTS = r"\((?:[^()]|\([^()]*\))*\)\s*$"
# The operators in a TorchInductor kernel's name: triton_poi_fused_<ops>_<n>.
_INDUCTOR = r"triton_(?:poi|red|per)_\w*"
_NORMS = r"(?:layer|rms|batch|group|instance)_?norm"

# (category, regular expression). Checked top to bottom; the first match wins.
RULES: tuple[tuple[str, str], ...] = (
    # 1. CPU operators added by PyTorch's module backward hooks, which the
    # instrumentation installs: profiling overhead, not the model's work.
    ("instrumentation", r"BackwardHookFunction"),
    # NCCL/RCCL (ncclDevKernel_*, ncclKernel_*), custom all-reduces (one/two-shot,
    # multimem, vLLM's cross_device_reduce), DeepEP's dispatch and combine.
    (
        "communication",
        r"nccl|c10d::|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|sendrecv"
        r"|cross_device_reduce|deep_ep::",
    ),
    (
        "optimizer",
        r"multi_tensor_apply|adamw?_|_adamw?\b|fused_adam|lamb_|sgd_|_foreach_|optimizer",
    ),
    # 2. TorchInductor: GEMM templates (triton_tem_fused_addmm_...), the
    # FlexAttention template (named without operators), then fused kernels.
    ("gemm", r"triton_tem_\w*?_(?:_scaled_|_int_|add|b|baddb)?mm(?:_|\b)"),
    ("attention", r"(?:^|\s)triton_tem_fused_\d+\b"),
    ("softmax", _INDUCTOR + r"softmax"),
    ("normalization", _INDUCTOR + _NORMS),
    ("elementwise", r"triton_poi_"),
    ("reduction", r"triton_(?:red|per)_"),
    # 3. Writes of keys and values into the paged KV cache: copies.
    ("elementwise", r"reshape_and_cache|concat_and_cache"),
    # 4. MoE routing: router top-k and gating, expert histograms, tokens
    # sorted and padded per expert (vLLM, TensorRT-LLM, triton_kernels).
    (
        "routing",
        r"topk_?gating|moe_align_block_size|moe::dev::routing|_routing_|_sum_bitmatrix",
    ),
    # 5. FlashAttention 2/3/4 (flash_fwd_*, flash::, FlashAttnFwdSm90), cuDNN
    # SDPA, PyTorch's memory-efficient kernels (fmha_cutlassF/B,
    # attention_kernel_*), FlashInfer, vLLM paged/unified attention, Triton
    # attention (_attn_fwd, _fwd_kernel).
    (
        "attention",
        r"flash_|flash::|flash_?attn|flash_?attention|fmha|attention|attn|scaled_dot_product"
        r"|sdpa|xformers|with(?:paged|ragged)?kv_?cache|(?:^|\s)_fwd_kernel\b",
    ),
    ("softmax", r"softmax|logsumexp|\bexp_|_exp\b|aten::exp\b|\bexp\b|exp_kernel"),
    # Layer/RMS/batch/group/instance norm, and the kernels PyTorch's layer and
    # group norm launch under other names (moments, gamma/beta gradients).
    (
        "normalization",
        _NORMS + r"|welford|\bbn_|rowwise_?moments|gamma_?beta|compute_?internal_?gradients"
        r"|compute\w*fused_?params",
    ),
    # Data layout transforms around cuDNN convolutions (NCHW <-> NHWC).
    ("layout", r"nchw_?to_?nhwc|nhwc_?to_?nchw|nchw_?to_?nchw_?\d*c\b"),
    # Convolutions run as GEMMs are GEMM kernels, matrix multiplication work:
    # implicit-GEMM kernels (xmma `*_implicit_gemm_*`, CUTLASS `ImplicitGemm*`
    # and `cutlass_tensorop_*fprop/dgrad/wgrad*`, MIOpen's igemm), cuDNN's
    # implicit/explicit `convolve_sgemm` and its GEMM-based kernels (`scudnn`,
    # `s1688cudnn`, fused Winograd among them).
    (
        "gemm",
        r"implicit_?gemm|(?:implicit|explicit)_?convolve_?sgemm|[shd\d]cudnn"
        r"|(?:cutlass|xmma)\w*(?:fprop|dgrad|wgrad)|igemm_(?:fwd|bwd|wrw)_gtc",
    ),
    # The rest of a convolution's kernels are no GEMMs: FFT and non-fused
    # Winograd transforms, im2col lowering (its GEMM is a gemm kernel), filter
    # flips, offset tables, cuDNN's direct data/weight-gradient engines,
    # depthwise kernels; and PyTorch's convolution operators.
    (
        "convolution",
        r"conv(?:olution|olve|[123]d|_depthwise|_transpose|_tbc)"
        r"|depthwise|winograd|fft2d|im2col|col2im|vol2col|col2vol|dgrad|wgrad|fprop"
        r"|flip_filter|cudnn::gemm::|cask_cudnn\w*::compute\w*offsets",
    ),
    # 6. GEMM and GEMV: cuBLAS (sgemm, gemmSN, gemv*, dot, sm90_xmma, nvjet,
    # split-K reduction), cuBLASLt's epilogue kernel, CUTLASS (2.x and 3.x),
    # magma, hipBLASLt/Tensile (Cijk_*), vLLM's ROCm wvSplitK, TensorRT-LLM's
    # batched GEMMs (bmm_E4m3_*, bmm_MxE4m3_*, bmm_Bfloat16_*), Triton
    # matmuls (_matmul_ogs_* and its epilogue _finalize_matmul_*,
    # fused_moe_kernel), Marlin, aiter's fmoe, DeepGEMM.
    # `[^b]gemm`: fbgemm_gpu's sparse and embedding kernels are no GEMMs.
    (
        "gemm",
        r"(?:^|[^b])gemm|gemv|cublas|splitkreduce|epilogue::impl::globalkernel|cutlass|nvjet"
        r"|wgmma|xmma|matmul|cijk_a|\bbmm_|marlin|wvsplitk|fused_moe_kernel|\bfmoe_"
        r"|aten::(?:mm|addmm|bmm|baddbmm|linear|mv|addmv|dot|_scaled_mm|_grouped_mm)\b"
        r"|\b(?:maxwell|pascal|volta|turing|ampere|hopper|blackwell|sm\d+)_",
    ),
    # 7. torch.topk and torch.sort (gatherTopK, bitonic/radix sort), CUB's
    # radix and merge sorts.
    (
        "sort",
        r"topk|bitonic_?sort|radix_?sort|merge_?sort|segmented_?sort|aten::(?:arg)?sort\b",
    ),
    # 8. Generic reductions (and CUB's other device algorithms), then elementwise.
    ("reduction", r"reduce|reduction|aten::(?:sum|mean|max|min|argmax|norm|amax)\b|cub::"),
    (
        "elementwise",
        r"elementwise|vectorized|unrolled|pointwise|index_?select|gather|scatter|embedding"
        r"|cat_?array|dropout|triu_tril|act_and_mul"
        r"|aten::(?:add|mul|sub|div|gelu|relu"
        r"|silu|tanh|pow|copy|_to_copy|fill|zero|dropout|bernoulli|neg|rsqrt|sqrt|where|clamp|cat"
        r"|index|masked)",
    ),
)


def rule_text(name: pl.Expr, short_name: pl.Expr) -> pl.Expr:
    """The text the rules are matched on: the name without its argument list, the short name."""
    # The argument list of a demangled name says nothing about what the kernel
    # does and misleads (`cudnn::reduced_divisor` is no reduction): drop it.
    signature = name.fill_null("").str.replace(TRAILING_ARGUMENTS, "")
    return pl.concat_str([signature, short_name.fill_null("")], separator=" ")


def category_expr(kind: pl.Expr, name: pl.Expr, short_name: pl.Expr) -> pl.Expr:
    """Expression giving the category of each operation."""
    text = rule_text(name, short_name)
    expr: pl.Expr = pl.lit("other")
    for category, pattern in reversed(RULES):
        expr = pl.when(text.str.contains(f"(?i){pattern}")).then(pl.lit(category)).otherwise(expr)
    return (
        pl.when(kind == "memcpy")
        .then(pl.lit("memcpy"))
        .when(kind == "memset")
        .then(pl.lit("memset"))
        .when(kind == "graph")
        .then(pl.lit("graph"))
        .otherwise(expr)
    )
