"""Kernel and operator categories, as data.

`RULES` is an ordered table: the first pattern that matches an operation's
name (demangled and short name, case-insensitive) gives its category; memcpy
and memset operations are categorised by kind. Anything unmatched is
`other`, so unknown kernels stay visible. docs/outputs.md lists the table.
"""

from __future__ import annotations

import polars as pl

CATEGORIES = (
    "gemm",
    "attention",
    "softmax",
    "normalization",
    "elementwise",
    "reduction",
    "optimizer",
    "memcpy",
    "memset",
    "communication",
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
    (
        "gemm",
        r"gemm|cutlass|cublas|nvjet|wgmma|xmma|matmul|aten::(?:mm|addmm|bmm|baddbmm|linear)\b"
        r"|\b(?:ampere|volta|turing|hopper|sm\d+)_|conv|scudnn|implicit_convolve",
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
        .otherwise(expr)
    )
