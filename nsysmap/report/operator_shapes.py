"""Operator input shapes per module, and softmax against the attention matmuls in FLOPs.

Shapes are those PyTorch recorded (ops.parquet's `input_shapes`); one *call*
is one operator call (nsysmap.flops.aten_flops: `op_call`), not one kernel.
"""

from __future__ import annotations

import polars as pl

from nsysmap.flops.aten_flops import CPU_COMPOSITES, signature_table
from nsysmap.report.scope_tables import in_attention_module, layer_path

REPORT_SHAPES = pl.Schema(
    {
        "module": pl.String,
        "module_class": pl.String,
        "direction": pl.String,
        "aten_op": pl.String,
        "input_shapes": pl.String,  # e.g. "[[2304], [1024, 768], [768, 2304], [], []]"
        "calls": pl.Int64,
        "matmul_flop_per_call": pl.Int64,  # null: no shapes
        "other_flop_estimate_per_call": pl.Int64,
        "flop_counted": pl.Boolean,  # false: a CPU-backend composite, its children are counted
    }
)
# The operators people ask about, by family (regular expressions on the aten name).
FAMILIES: tuple[tuple[str, str], ...] = (
    ("layer_norm", r"^aten::(native_)?layer_norm(_backward)?$"),
    ("softmax", r"^aten::(_safe_|_log_|log_|_)?softmax(_backward_data)?$"),
    ("add", r"^aten::add_?$"),
    ("addmm / linear", r"^aten::(addmm|linear|mm|matmul|bmm|baddbmm)$"),
    ("attention", r"attention"),
    ("sum", r"^aten::sum$"),
)
# What each family holds besides its name, as the report says it.
FAMILY_NOTES = {
    "layer_norm": "with its backward",
    "softmax": "with log-softmax and the backward",
    "addmm / linear": "with mm, matmul, bmm and baddbmm",
    "attention": "any operator named for attention",
}


def families_text() -> str:
    """The families, as a phrase: "layer_norm (with its backward), softmax (...), ..."."""
    return ", ".join(
        f"{name} ({FAMILY_NOTES[name]})" if name in FAMILY_NOTES else name for name, _ in FAMILIES
    )


SOFTMAX_FLOPS = ("softmax", "matmul", "attention_softmax", "attention_matmul")
# Phases that say a call's direction where no module call does (emit_nvtx exports).
DIRECTION_PHASES = ("forward", "backward")


def call_direction() -> pl.Expr:
    """The direction of an operator call: its module call's, else its phase's (forward or
    backward), else null."""
    by_phase = pl.when(pl.col("phase").is_in(DIRECTION_PHASES)).then(pl.col("phase"))
    return pl.coalesce(pl.col("direction").cast(pl.String), by_phase).alias("direction")


def shapes_table(ops_f: pl.DataFrame) -> pl.DataFrame:
    """REPORT_SHAPES: calls per (module, direction, operator, shapes), most calls first."""
    calls = ops_f.filter(pl.col("op_call") & pl.col("input_shapes").is_not_null())
    composite = (pl.col("kind") == "cpu_op") & pl.col("aten_op").is_in(list(CPU_COMPOSITES))
    grouped = calls.group_by(
        "module", "module_class", call_direction(), "aten_op", "input_shapes"
    ).agg(pl.len().alias("calls"), (~composite).all().alias("flop_counted"))
    per_call = signature_table(grouped.select("aten_op", "input_shapes").unique()).select(
        "aten_op",
        "input_shapes",
        pl.col("matmul_flop").alias("matmul_flop_per_call"),
        pl.col("other_flop_estimate").alias("other_flop_estimate_per_call"),
    )
    out = grouped.join(per_call, on=["aten_op", "input_shapes"], how="left")
    ordered = out.sort(
        ["module", "direction", "aten_op", "calls", "input_shapes"],
        descending=[False, False, False, True, False],
        nulls_last=True,
    )
    return ordered.select(REPORT_SHAPES.names()).cast(REPORT_SHAPES)


def asked_shapes(shapes: pl.DataFrame) -> pl.DataFrame:
    """The asked-about families: family, operator, direction, shapes, calls, layers.

    Only calls inside a module, when there are any (the optimizer's and the
    loss backward's operators are left out then).
    """
    family = pl.lit(None, pl.String)
    for name, pattern in reversed(FAMILIES):
        family = (
            pl.when(pl.col("aten_op").str.contains(pattern)).then(pl.lit(name)).otherwise(family)
        )
    order = {name: i for i, (name, _) in enumerate(FAMILIES)}
    rows = shapes.with_columns(family=family, layer=layer_path()).filter(
        pl.col("family").is_not_null()
    )
    if rows["module"].is_not_null().any():
        rows = rows.filter(pl.col("module").is_not_null())
    layer = pl.when(pl.col("layer") == "").then(pl.lit("(root)")).otherwise(pl.col("layer"))
    grouped = rows.group_by("family", "aten_op", "direction", "input_shapes").agg(
        pl.col("calls").sum(),
        pl.col("matmul_flop_per_call").first(),
        pl.col("other_flop_estimate_per_call").first(),
        pl.col("flop_counted").all(),
        layer.fill_null("(no module)").unique().sort().str.join(", ").alias("layers"),
    )
    # Shapes break ties between rows with as many calls: the order never depends on grouping.
    return grouped.sort(
        [pl.col("family").replace_strict(order), "aten_op", "direction", "calls", "input_shapes"],
        descending=[False, False, False, True, False],
        nulls_last=True,
    )


def softmax_flops(
    ops_f: pl.DataFrame, model: pl.DataFrame | None, source: str | None
) -> dict[str, int | None]:
    """FLOPs of softmax and matmul work, overall and in attention modules.

    `shapes`: every operation of the capture; `model`: one step of the model's
    FLOP document; no source: all None.
    """
    if source == "model" and model is not None:
        return _softmax_split(model)
    if source == "shapes":
        # Softmax kernels as the kernel categories say (the time's selection), so a
        # hand-written softmax's `exp` kernels count as they do in the categories table.
        rows = ops_f.drop("kind").rename({"flop_kind": "kind"})
        return _softmax_split(rows, pl.col("category") == "softmax")
    return dict.fromkeys(SOFTMAX_FLOPS)


def _softmax_split(
    rows: pl.DataFrame, softmax_kernels: pl.Expr | None = None
) -> dict[str, int | None]:
    softmax = pl.col("kind") == "softmax"
    every_softmax = softmax if softmax_kernels is None else softmax_kernels
    matmul = pl.col("kind").is_in(["matmul", "attention"])
    fused = pl.col("kind") == "attention"
    total = pl.col("matmul_flop").fill_null(0) + pl.col("other_flop_estimate").fill_null(0)
    sums = rows.select(
        softmax=total.filter(every_softmax).sum(),
        matmul=pl.col("matmul_flop").filter(matmul).sum(),
        attention_softmax=total.filter(softmax & in_attention_module()).sum(),
        attention_matmul=pl.col("matmul_flop")
        .filter(fused | (matmul & in_attention_module()))
        .sum(),
    )
    return {k: int(v or 0) for k, v in sums.row(0, named=True).items()}
