"""Which collective a communication kernel runs: all_reduce, all_gather, ... (pure, Polars).

Two sources, as data below:

* the kernel's name: NCCL names its kernels after the collective
  (`ncclDevKernel_AllReduce_Sum_f32_RING_LL`,
  `ncclKernel_AllReduce_RING_LL_Sum_float`, `ncclKernel_Broadcast_...`);
  the word after `Kernel_` is read, or the whole name for kernels of other
  libraries;
* the annotation the launch ran under: PyTorch's `nccl:all_reduce`,
  `nccl:_reduce_scatter_base`, `c10d::allreduce_` ranges, or NCCL's own
  `ncclAllReduce` ranges, in `range_path` (the innermost one that names a
  collective).

Generic kernels (`SendRecv`, which also carries all-to-all, reduce-scatter
and all-gather done as point-to-point; `Generic`; names that say nothing)
take the annotation's collective; a kernel that names its collective keeps
it. Without either: `send_recv` for a point-to-point kernel, else `other`.
"""

from __future__ import annotations

import polars as pl

# (collective, pattern) checked top to bottom against a word lower-cased with
# its underscores removed ("_reduce_scatter_base" -> "reducescatterbase").
# The short names (reduce, gather, ...) must begin the word: a whole kernel
# name such as `cross_device_reduce_1stage` does not name a collective.
COLLECTIVES: tuple[tuple[str, str], ...] = (
    ("all_reduce", r"allreduce"),
    ("all_gather", r"allgather"),
    ("reduce_scatter", r"reducescatter"),
    ("all_to_all", r"alltoall"),
    ("broadcast", r"broadcast"),
    ("send_recv", r"sendrecv|^send|^recv"),
    ("reduce", r"^reduce"),
    ("gather", r"^gather"),
    ("scatter", r"^scatter"),
)
POINT_TO_POINT = "send_recv"
OTHER = "other"
# The word of an NCCL kernel name (`ncclDevKernel_AllReduce_...` -> allreduce).
KERNEL_WORD = r"kernel_([a-z]+)"
# Annotations in a range path that name a collective (prefix stripped before matching).
ANNOTATION = r"(?:nccl:?|c10d::)[a-z_]+"
ANNOTATION_PREFIX = r"^(?:nccl:?|c10d::)"


def _kind(word: pl.Expr) -> pl.Expr:
    """The collective a normalised word names, or null."""
    expr = pl.lit(None, pl.String)
    for kind, pattern in reversed(COLLECTIVES):
        expr = pl.when(word.str.contains(pattern)).then(pl.lit(kind)).otherwise(expr)
    return expr


def kernel_collective(name: pl.Expr) -> pl.Expr:
    """The collective a kernel's name says (null when it says none)."""
    lower = name.str.to_lowercase()
    word = pl.coalesce(lower.str.extract(KERNEL_WORD, 1), lower).str.replace_all("_", "")
    return _kind(word)


def annotated_collective(range_path: pl.Expr) -> pl.Expr:
    """The collective of the innermost annotation in a range path that names one, or null."""
    words = range_path.str.to_lowercase().str.extract_all(ANNOTATION)
    kinds = words.list.eval(
        _kind(pl.element().str.replace(ANNOTATION_PREFIX, "").str.replace_all("_", ""))
    )
    return kinds.list.drop_nulls().list.last()


def collective(name: pl.Expr, range_path: pl.Expr) -> pl.Expr:
    """The collective of each communication kernel (see the module)."""
    own = kernel_collective(name)
    generic = own.is_null() | (own == POINT_TO_POINT)
    return (
        pl.when(generic)
        .then(pl.coalesce(annotated_collective(range_path), own, pl.lit(OTHER)))
        .otherwise(own)
    )
