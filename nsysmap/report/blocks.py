"""Per block and part: time by phase and FLOP rates of each numbered module (pure).

A *block* is a module whose path ends in a number with no numbered module
above it (the children of a ModuleList: `transformer.h.3`, `encoder.layer.0`,
`features.2`). Its *parts* are its direct children (`attn`, `mlp`, `ln_1`),
each with every module below it; the block's own operations (the residual
adds of a GPT-2 block) are the part `""`. Times are split by phase:

    transformer.h.3.attn.c_attn  ->  block transformer.h.3, part attn
    transformer.h.3              ->  block transformer.h.3, part ""
    transformer.wte              ->  not in a block

Devices and steps are pooled, as in report_layers; rates follow
nsysmap.report.flops_time (pooled over Σ time × peak).
"""

from __future__ import annotations

import polars as pl

from nsysmap.report.flops_time import pooled

PHASE_COLUMNS = ("forward", "backward")  # every other phase, and none, is "other"
REPORT_BLOCKS = pl.Schema(
    {
        "block": pl.String,  # transformer.h.3
        "block_class": pl.String,
        "block_index": pl.Int64,  # 3
        "part": pl.String,  # direct child (attn, mlp, ...); "" for the block's own operations
        "part_class": pl.String,
        "ops": pl.Int64,
        "forward_ns": pl.Int64,
        "backward_ns": pl.Int64,
        "other_ns": pl.Int64,  # every other phase, and operations outside every phase
        "time_ns": pl.Int64,
        "matmul_flop": pl.Int64,
        "recompute_flop": pl.Int64,
        "tflops_per_s": pl.Float64,
        "mfu": pl.Float64,
    }
)
# The outermost numbered segment: "a.h.3.attn" -> "a.h.3".
_BLOCK = r"^((?:[^.]+\.)*?\d+)(?:\.|$)"


def block_of() -> pl.Expr:
    """The block a module path lies in (null when none)."""
    return pl.col("module").str.extract(_BLOCK, 1)


def part_of(block: pl.Expr) -> pl.Expr:
    """The direct child of `block` that a module path lies in ("" for the block itself)."""
    rest = pl.col("module").str.slice(block.str.len_chars() + 1)
    return rest.str.split(".").list.first().fill_null("")


def _in_blocks(module_phase: pl.DataFrame) -> pl.DataFrame:
    """Rows of modules inside a block, with `block` and `part`."""
    rows = module_phase.with_columns(block=block_of()).filter(pl.col("block").is_not_null())
    return rows.with_columns(part=part_of(pl.col("block")))


def _pool(rows: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Pooled rows (nsysmap.report.flops_time.pooled) with time by phase and block order columns."""
    by_phase = [
        pl.col("time_ns").filter(pl.col("phase") == p).sum().alias(f"{p}_ns") for p in PHASE_COLUMNS
    ]
    grouped = pooled(rows, keys, by_phase)
    return grouped.with_columns(
        other_ns=pl.col("time_ns") - pl.col("forward_ns") - pl.col("backward_ns"),
        block_index=pl.col("block").str.extract(r"(\d+)$").cast(pl.Int64),
        _list=pl.col("block").str.replace(r"\.?\d+$", ""),
    )


def _classes(module_phase: pl.DataFrame, path: str, column: str) -> pl.DataFrame:
    named = module_phase.filter(pl.col("module_class").is_not_null())
    pairs = named.select("module", "module_class").unique("module", keep="first")
    return pairs.rename({"module": path, "module_class": column})


def blocks(module_phase: pl.DataFrame) -> pl.DataFrame:
    """REPORT_BLOCKS from report_module_phase rows, in block order, parts by time."""
    rows = _in_blocks(module_phase)
    if rows.is_empty():
        return pl.DataFrame(schema=REPORT_BLOCKS)
    path = (
        pl.when(pl.col("part") == "")
        .then("block")
        .otherwise(pl.col("block") + "." + pl.col("part"))
    )
    named = (
        _pool(rows, ["block", "part"])
        .with_columns(_path=path)
        .join(_classes(module_phase, "_path", "part_class"), on="_path", how="left")
        .join(_classes(module_phase, "block", "block_class"), on="block", how="left")
    )
    ordered = named.sort(
        ["_list", "block_index", "time_ns", "part"], descending=[False, False, True, False]
    )
    return ordered.select(REPORT_BLOCKS.names()).cast(REPORT_BLOCKS)


BLOCK_TOTALS = pl.Schema(
    {name: dtype for name, dtype in REPORT_BLOCKS.items() if name not in ("part", "part_class")}
)


def block_totals(module_phase: pl.DataFrame) -> pl.DataFrame:
    """One row per block, its parts together (BLOCK_TOTALS), in block order."""
    rows = _in_blocks(module_phase)
    if rows.is_empty():
        return pl.DataFrame(schema=BLOCK_TOTALS)
    named = _pool(rows, ["block"]).join(
        _classes(module_phase, "block", "block_class"), on="block", how="left"
    )
    ordered = named.sort(["_list", "block_index"])
    return ordered.select(BLOCK_TOTALS.names()).cast(BLOCK_TOTALS)


def part_order(table: pl.DataFrame) -> list[str]:
    """Parts of REPORT_BLOCKS by their total time over all blocks, largest first."""
    totals = table.group_by("part").agg(pl.col("time_ns").sum())
    return totals.sort(["time_ns", "part"], descending=[True, False])["part"].to_list()


def part_label(part: str) -> str:
    """How a part is named in tables and charts: the block's own operations are "(own)"."""
    return part or "(own)"
