"""Per block and part: time by call direction and FLOP rates of each block (pure).

A *block* is the outermost numbered module of a path, or for torch.profiler
paths the outermost repeated instance (nsysmap.attribution.module_names):
`transformer.h.3`, `encoder.layer.0`, `features.2`,
`GPT2LMHeadModel_0.GPT2Model_0.GPT2Block_3`. Its *parts* are its direct
children (`attn`, `mlp`, `ln_1`; instance names collapsed, `GPT2Attention_*`,
so that the parts of every block line up), each with every module below it;
the block's own operations (the residual adds of a GPT-2 block) are the part
`""`. Times are split by call direction, as by_module's:

    transformer.h.3.attn.c_attn  ->  block transformer.h.3, part attn
    transformer.h.3              ->  block transformer.h.3, part ""
    transformer.wte              ->  not in a block

Devices and steps are pooled, as in report_layers; rates follow
nsysmap.report.flops_time (pooled over Σ time × peak).
"""

from __future__ import annotations

import polars as pl

from nsysmap.attribution.module_names import (
    block_index,
    block_list,
    collapsed_instance,
    instance_class,
    last_part,
    with_block,
)
from nsysmap.report.flops_time import DIRECTION_TIME, pooled

REPORT_BLOCKS = pl.Schema(
    {
        "block": pl.String,  # transformer.h.3
        "block_class": pl.String,
        "block_index": pl.Int64,  # 3
        "part": pl.String,  # direct child (attn, mlp, ...); "" for the block's own operations
        "part_class": pl.String,
        "ops": pl.Int64,
        **DIRECTION_TIME,  # time in forward calls, in backward calls
        "other_ns": pl.Int64,  # operations of neither direction (none known)
        "time_ns": pl.Int64,
        "matmul_flop": pl.Int64,
        "recompute_flop": pl.Int64,
        "tflops_per_s": pl.Float64,
        "mfu": pl.Float64,
    }
)


def part_of(block: pl.Expr) -> pl.Expr:
    """The direct child of `block` that a module path lies in ("" for the block itself)."""
    rest = pl.col("module").str.slice(block.str.len_chars() + 1)
    return rest.str.split(".").list.first().fill_null("")


def _in_blocks(module_phase: pl.DataFrame) -> pl.DataFrame:
    """Rows of modules inside a block, with `block`, `part` and the classes of both."""
    rows = with_block(module_phase).filter(pl.col("block").is_not_null())
    child = part_of(pl.col("block"))
    rows = rows.with_columns(
        part=collapsed_instance(child),
        _part_path=pl.when(child == "").then("block").otherwise(pl.col("block") + "." + child),
        _child_class=instance_class(child),
    )
    classes = _classes(module_phase)
    return (
        rows.join(
            classes.rename({"module": "_part_path", "_class": "_part_class"}),
            "_part_path",
            how="left",
        )
        .join(classes.rename({"module": "block", "_class": "_block_class"}), "block", how="left")
        .with_columns(
            part_class=pl.coalesce("_part_class", "_child_class"),
            block_class=pl.coalesce("_block_class", instance_class(last_part(pl.col("block")))),
        )
    )


def _pool(rows: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Pooled rows (nsysmap.report.flops_time.pooled) with time by direction and block order."""
    classes = [pl.col(c).drop_nulls().first() for c in ("block_class", "part_class")]
    grouped = pooled(rows, keys, [pl.col(*DIRECTION_TIME).sum(), *classes])
    return grouped.with_columns(
        other_ns=pl.col("time_ns") - pl.col("forward_ns") - pl.col("backward_ns"),
        block_index=block_index(pl.col("block")),
        _list=block_list(pl.col("block")),
    )


def _classes(module_phase: pl.DataFrame) -> pl.DataFrame:
    """module -> `_class`: the class module_phase names for each path."""
    named = module_phase.filter(pl.col("module_class").is_not_null())
    pairs = named.select("module", "module_class").unique("module", keep="first")
    return pairs.rename({"module_class": "_class"})


def blocks(module_phase: pl.DataFrame) -> pl.DataFrame:
    """REPORT_BLOCKS from report_module_phase rows, in block order, parts by time."""
    rows = _in_blocks(module_phase)
    if rows.is_empty():
        return pl.DataFrame(schema=REPORT_BLOCKS)
    ordered = _pool(rows, ["block", "part"]).sort(
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
    ordered = _pool(rows, ["block"]).sort(["_list", "block_index"])
    return ordered.select(BLOCK_TOTALS.names()).cast(BLOCK_TOTALS)


def part_order(table: pl.DataFrame) -> list[str]:
    """Parts of REPORT_BLOCKS by their total time over all blocks, largest first."""
    totals = table.group_by("part").agg(pl.col("time_ns").sum())
    return totals.sort(["time_ns", "part"], descending=[True, False])["part"].to_list()


def part_label(part: str) -> str:
    """How a part is named in tables and charts: the block's own operations are "(own)"."""
    return part or "(own)"
