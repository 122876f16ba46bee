"""Kernel and operator categories, as data.

`RULES` is an ordered table: the first pattern that matches an operation's
name (demangled and short name, case-insensitive) gives its category; memcpy
and memset operations and CUDA graph replays are categorised by kind. Anything unmatched is
`other`, so unknown kernels stay visible. docs/outputs.md lists the table.
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

# (category, regular expression). Checked top to bottom.
RULES: tuple[tuple[str, str], ...] = (
    # CPU operators added by PyTorch's module backward hooks, which the
    # instrumentation installs: profiling overhead, not the model's work.
    ("instrumentation", r"BackwardHookFunction"),
    ("communication", r"nccl|c10d::|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|sendrecv"),
    (
        "optimizer",
        r"multi_tensor_apply|adamw?_|_adamw?\b|fused_adam|lamb_|sgd_|_foreach_|optimizer",
    ),
    ("attention", r"flash|fmha|attention|attn|scaled_dot_product|sdpa|xformers"),
    ("softmax", r"softmax|logsumexp|\bexp_|_exp\b|aten::exp\b|\bexp\b|exp_kernel"),
    (
        "normalization",
        r"layer_?norm|rms_?norm|batch_?norm|group_?norm|instance_?norm|welford|\bbn_",
    ),
    # Data layout transforms around cuDNN convolutions (NCHW <-> NHWC).
    ("layout", r"nchw_?to_?nhwc|nhwc_?to_?nchw|nchw_?to_?nchw_?\d*c\b"),
    # Convolutions: cuDNN's implicit/explicit GEMM, FFT, Winograd and im2col
    # algorithms and their data/weight-gradient kernels, cuDNN's own
    # (`scudnn`, `cudnn::gemm::`) and CUTLASS/xmma fprop/dgrad/wgrad kernels,
    # PyTorch's native and CPU convolution operators. Before gemm: many of
    # these are GEMMs underneath, but the work is the convolution.
    (
        "convolution",
        r"conv(?:olution|olve|[123]d|_depthwise|_transpose|_tbc)|implicit_?gemm_?conv"
        r"|depthwise|winograd|fft2d|im2col|col2im|vol2col|col2vol|dgrad|wgrad|fprop"
        r"|flip_filter|[shd\d]cudnn|cudnn::gemm::",
    ),
    (
        "gemm",
        r"gemm|cutlass|cublas|nvjet|wgmma|xmma|matmul|aten::(?:mm|addmm|bmm|baddbmm|linear)\b"
        r"|\b(?:ampere|volta|turing|hopper|sm\d+)_",
    ),
    ("reduction", r"reduce|reduction|aten::(?:sum|mean|max|min|argmax|norm|amax)\b|cub::"),
    (
        "elementwise",
        r"elementwise|vectorized|unrolled|pointwise|triton_poi|index_?select|gather|scatter|embedding"
        r"|aten::(?:add|mul|sub|div|gelu|relu"
        r"|silu|tanh|pow|copy|_to_copy|fill|zero|dropout|bernoulli|neg|rsqrt|sqrt|where|clamp|cat"
        r"|index|masked)",
    ),
)


def category_expr(kind: pl.Expr, name: pl.Expr, short_name: pl.Expr) -> pl.Expr:
    """Expression giving the category of each operation."""
    # The argument list of a demangled name says nothing about what the kernel
    # does and misleads (`cudnn::reduced_divisor` is no reduction): drop it.
    signature = name.fill_null("").str.replace(TRAILING_ARGUMENTS, "")
    text = pl.concat_str([signature, short_name.fill_null("")], separator=" ")
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
