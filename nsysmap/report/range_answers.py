"""Answers from the profile's own ranges, where modules say nothing (pure).

A profile made without nsysmap's instrumentation has no modules, but often
ranges its author wrote around the code in question::

    forward pass > scaled dot product attention > computing attention scores
                                                > masking
                                                > computing softmax
                                                > final matmul

`attention_times` compares softmax with the attention matmuls through them:
an operation launched inside a range whose name mentions softmax (or
matmul, scores), itself inside a range whose name mentions attention, is
attention softmax (or matmul) work, whatever its kernels. Only the user's
own ranges count: not PyTorch's operator ranges, not nsysmap's.

`attention_from` picks modules when any operation has an attention module,
else these ranges; `structure_notes` says what a profile without modules
lacks; `range_table` is `by_range.parquet` with devices pooled: the
per-range section.
"""

from __future__ import annotations

import polars as pl

from nsysmap.attribution.paths import PATH_SEPARATOR
from nsysmap.report import scope_tables as rt
from nsysmap.summaries.range_paths import is_user_range

ATTENTION_RANGE = r"(?i)attention|attn"
SOFTMAX_RANGE = r"(?i)softmax"
MATMUL_RANGE = r"(?i)mat[ _-]?mul|\bscores?\b"

REPORT_RANGES = pl.Schema(
    {
        "range_path": pl.String,
        "range_name": pl.String,
        "range_depth": pl.Int32,
        "user": pl.Boolean,  # the user's own range (not an operator's, not nsysmap's)
        "calls": pl.Int64,
        "ops": pl.Int64,
        "time_ns": pl.Int64,  # exclusive
        "time_share": pl.Float64,
        "inclusive_ops": pl.Int64,
        "inclusive_ns": pl.Int64,
        "inclusive_share": pl.Float64,
        "span_ns": pl.Int64,
    }
)
_SUMS = ("calls", "ops", "time_ns", "inclusive_ops", "inclusive_ns", "span_ns")


def attention_part(enclosed: bool = True) -> pl.Expr:
    """ "softmax", "matmul" or null for each operation, from the ranges around its launch.

    `enclosed`: the softmax or matmul range must lie inside a range named for
    attention; without (a profile with no such range), the ranges are matched
    by their own names alone.
    """
    names = pl.col("range_path").str.split(PATH_SEPARATOR)
    user = is_user_range(pl.element())

    def mentions(items: pl.Expr, pattern: str) -> pl.Expr:
        return items.list.eval(user & pl.element().str.contains(pattern))

    if enclosed:
        attention = names.list.eval(user & _attention_container(pl.element()))
        inside = names.list.slice(attention.list.arg_max() + 1)
        in_attention = attention.list.any().fill_null(False)
    else:
        inside, in_attention = names, pl.lit(True)
    return (
        pl.when(in_attention & mentions(inside, SOFTMAX_RANGE).list.any())
        .then(pl.lit("softmax"))
        .when(in_attention & mentions(inside, MATMUL_RANGE).list.any())
        .then(pl.lit("matmul"))
    )


def _attention_container(name: pl.Expr) -> pl.Expr:
    """A range named for attention as a whole, not for one of its parts
    (`scaled dot product attention`, not `computing attention scores`)."""
    part = name.str.contains(SOFTMAX_RANGE) | name.str.contains(MATMUL_RANGE)
    return name.str.contains(ATTENTION_RANGE) & ~part


def attention_parts(ops: pl.DataFrame) -> pl.Series | None:
    """Each operation's attention part from the ranges; None when no range names one.

    Ranges inside a range named for attention when the profile has such ranges,
    else the softmax and matmul ranges by their own names.
    """
    if ops.is_empty() or ops["range_path"].is_null().all():
        return None
    names = pl.col("range_path").str.split(PATH_SEPARATOR)
    has_attention = ops.select(
        names.list.eval(is_user_range(pl.element()) & _attention_container(pl.element()))
        .list.any()
        .any()
    ).item()
    parts = ops.select(attention_part(enclosed=bool(has_attention))).to_series()
    return None if parts.is_null().all() else parts


def attention_times(ops: pl.DataFrame) -> dict[str, int] | None:
    """Time of softmax and matmul work in attention ranges; None when there is none."""
    parts = attention_parts(ops)
    if parts is None:
        return None
    sums = (
        ops.select("dur_ns")
        .with_columns(part=parts)
        .select(
            attention_softmax=pl.col("dur_ns").filter(pl.col("part") == "softmax").sum(),
            attention_matmul=pl.col("dur_ns").filter(pl.col("part") == "matmul").sum(),
        )
    )
    return {k: int(v or 0) for k, v in sums.row(0, named=True).items()}


def attention_from(ops: pl.DataFrame) -> tuple[dict[str, int], str | None]:
    """Softmax and matmul time (rt.softmax_times), and where attention comes from.

    Attention modules when any operation has one; else the profile's own
    ranges around attention (`attention_times`), when there are such.
    """
    times = rt.softmax_times(ops)
    if ops.select(rt.in_attention_module().any()).item():
        return times, "modules"
    from_ranges = attention_times(rt.scope_filter(ops, "step"))
    if from_ranges is None:
        return times, None
    return {**times, **from_ranges}, "ranges"


def structure_notes(ops: pl.DataFrame) -> list[str]:
    """What the profile lacks to say which part of the model ran what."""
    has_modules = ops["module"].is_not_null().any()
    has_ranges = ops["range_path"].is_not_null().any()
    if has_modules:
        return []
    if not has_ranges:
        return [
            "No modules and no ranges: nothing says which part of the model launched a "
            "kernel. To get them: `nsysmap run`, NVTX or `record_function` ranges, "
            "`emit_nvtx` (operator ranges)."
        ]
    return [
        "No modules: the layer table is empty; the range section (and the attention "
        "comparison, where ranges name attention) answer from the profile's own ranges."
    ]


def range_table(by_range: pl.DataFrame | None) -> pl.DataFrame | None:
    """REPORT_RANGES: every range path with devices pooled, most time inside first.

    None without a by_range table (an output directory of an older nsysmap).
    """
    if by_range is None:
        return None
    total = by_range["time_ns"].sum()
    pooled = (
        by_range.filter(pl.col("range_path").is_not_null())
        .group_by("range_path", "range_name", "range_depth")
        .agg(pl.col(c).sum() for c in _SUMS)
        .with_columns(
            user=is_user_range(pl.col("range_name")),
            time_share=pl.col("time_ns") / total if total else pl.lit(0.0),
            inclusive_share=pl.col("inclusive_ns") / total if total else pl.lit(0.0),
        )
        .sort(["inclusive_ns", "range_path"], descending=[True, False])
    )
    return pooled.select(REPORT_RANGES.names()).cast(REPORT_RANGES)


def shown_ranges(table: pl.DataFrame) -> pl.DataFrame:
    """The user's own ranges, or every range when the profile has none of its own."""
    mine = table.filter("user")
    return mine if mine.height else table
