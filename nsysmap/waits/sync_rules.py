"""What counts as the host waiting on the GPU: the one place these name rules live.

A *synchronisation* is a CUDA API call that blocks the calling thread until
GPU work is done, or a framework operator range that makes one (`.item()`
reads a GPU scalar). Each rule is a regular expression on the API call's or
the range's name.
"""

from __future__ import annotations

import polars as pl

# CUDA runtime and driver calls that block the host (names carry a version suffix:
# cudaDeviceSynchronize_v3020). A plain cudaMemcpy is synchronous; its Async form is not.
SYNC_API = (
    r"^cu(da)?(Device|Stream|Event|Ctx)Synchronize",
    r"^cudaMemcpy(2D|3D)?(ToSymbol|FromSymbol)?(_v\d+)?$",
    r"^cuMemcpy(DtoH|AtoH)(_v\d+)?$",
)
# Operator ranges (NVTX from emit_nvtx, torch.profiler CPU operators) that read a
# GPU value on the host: `.item()`, and what it calls.
SYNC_RANGE = (
    r"^aten::_local_scalar_dense\b",
    r"^aten::item\b",
)


def one_pattern(patterns: tuple[str, ...]) -> str:
    """One regular expression that matches where any of `patterns` does."""
    return "|".join(f"(?:{p})" for p in patterns)


def matches(column: str, patterns: tuple[str, ...]) -> pl.Expr:
    """True where `column` matches any of `patterns`."""
    return pl.col(column).str.contains(one_pattern(patterns))
