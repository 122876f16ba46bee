"""Softmax against the attention matmuls, in time and in FLOPs, as answers.json says it.

One source of attention for time and FLOPs alike:

* `modules`: operations of modules whose class names attention (softmax kernels
  and matmul kernels in them, plus every fused attention kernel);
* `ranges`: the profile's own ranges (nsysmap.report.range_answers): every
  operation launched inside a softmax range, or a scores / matmul range;
* none: the answer is unknown, with the reason.

FLOPs follow the report's FLOP source: shapes (each operation's FLOPs from its
operator's recorded shapes: matmul FLOPs for the matmul part, all estimated
FLOPs for the softmax part, a hand-written softmax's max, sub, exp, sum and div
included) or the model's FLOP document (modules only). Both sides are taken
over the step scope (nsysmap.report.scope_tables).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from nsysmap.flops.aten_flops import flop_factor
from nsysmap.report import scope_tables as rt
from nsysmap.report.format import OUTSIDE_PHASES
from nsysmap.report.operator_shapes import softmax_flops
from nsysmap.report.range_answers import attention_parts

NO_ATTENTION = (
    "no module whose class names attention and no range named for softmax or the attention matmuls"
)
FUSED = "softmax runs inside fused attention kernels: its time cannot be told apart"
# The softmax operators whose estimates the model's FLOP document counts with.
DOCUMENT_SOFTMAX = ("aten::_softmax", "aten::_softmax_backward_data")
NO_KERNEL_FLOPS = "the attention matmul kernels' FLOPs are unknown"
FUSED_FLOPS = (
    "softmax runs inside fused attention kernels: their FLOPs count the matmuls, not the softmax"
)


def _ratio_entry(softmax: int | None, matmul: int | None, unit: str, why: str | None) -> dict:
    """Softmax against matmul; a softmax of 0 hidden in fused kernels is unknown, not 0."""
    hidden = why in (FUSED, FUSED_FLOPS) and not softmax
    return {
        f"softmax_{unit}": None if hidden else softmax,
        f"matmul_{unit}": matmul,
        "ratio": None if why else rt.share(softmax, matmul),
        "unknown": why,
    }


def _range_flops(ops_f: pl.DataFrame, parts: pl.Series) -> tuple[int, int]:
    """(softmax FLOPs, matmul FLOPs) of the operations in softmax and matmul ranges."""
    every = pl.col("matmul_flop").fill_null(0) + pl.col("other_flop_estimate").fill_null(0)
    sums = ops_f.with_columns(part=parts).select(
        softmax=every.filter(pl.col("part") == "softmax").sum(),
        matmul=pl.col("matmul_flop").fill_null(0).filter(pl.col("part") == "matmul").sum(),
    )
    row = sums.row(0, named=True)
    return int(row["softmax"] or 0), int(row["matmul"] or 0)


def _phases(rows: pl.DataFrame, counted: pl.Expr | pl.Series) -> list[str]:
    """The phases of the rows counted, first-run first; work outside every phase as such."""
    phase = pl.col("phase").fill_null(OUTSIDE_PHASES)
    picked = rows.filter(counted).select(phase, "start_ns")
    ordered = picked.group_by("phase").agg(pl.col("start_ns").min()).sort("start_ns", "phase")
    return ordered["phase"].to_list()


def _flop_why(no_flops: str | None, fused: bool, softmax_flop: int | None) -> str | None:
    """Why softmax FLOPs are unknown: no FLOPs at all, or none outside fused kernels."""
    if no_flops:
        return no_flops
    return FUSED_FLOPS if fused and not softmax_flop else None


def attention_coverage(answer: dict[str, Any]) -> str | None:
    """ "the forward phase": the phases the attention work was found in, when the scope has
    a forward or backward phase they lack (cs336's attention ranges mark only the forward
    pass; attention never runs in the optimizer)."""
    covered, every = answer.get("attention_phases") or [], answer.get("step_phases") or []
    lacking = [p for p in ("forward", "backward") if p in every and p not in covered]
    if not answer["attention_source"] or not covered or not lacking:
        return None
    named = [p if p == OUTSIDE_PHASES else f"{p} phase" for p in covered]
    return "the " + " and the ".join(named)


def _per_element(rows: pl.DataFrame, flop_source: str | None) -> dict[str, Any] | None:
    """The FLOPs per element each softmax operator counted: those the estimates give the
    operators found, and the operators present but not counted (a hand-written softmax's
    `aten::max`). None without FLOPs from shapes."""
    if flop_source == "model":  # the FLOP document counts softmax forward and backward so
        document = [{"aten_op": op, "per_element": flop_factor(op)} for op in DOCUMENT_SOFTMAX]
        return {"operators": document, "uncounted": [], "total": None, "document": True}
    if flop_source != "shapes" or rows.is_empty():
        return None
    calls = rows.filter(pl.col("op_call").fill_null(False) & pl.col("aten_op").is_not_null())
    ops = sorted(set(calls["aten_op"].to_list()))
    counted = [{"aten_op": op, "per_element": flop_factor(op)} for op in ops if flop_factor(op)]
    uncounted = [op for op in ops if not flop_factor(op)]
    total = sum(flop_factor(op) for op in ops)
    return {"operators": counted, "uncounted": uncounted, "total": total, "document": False}


def _kernel_side(rows: pl.DataFrame, picked: pl.Series) -> tuple[int, int]:
    """(time, matmul FLOPs) of the matmul kernels among `rows` where `picked`."""
    mine = rows.filter(picked.fill_null(False)).filter(rt.is_matmul())
    flop = mine["matmul_flop"].fill_null(0).sum() if "matmul_flop" in mine.columns else 0
    return int(mine["dur_ns"].sum()), int(flop or 0)


def softmax_vs_matmul(
    ops_f: pl.DataFrame, model: pl.DataFrame | None, flop_source: str | None
) -> dict[str, Any]:
    """The answers.json entry `softmax_vs_matmul`."""
    rows = rt.scope_filter(ops_f, "step")
    times = rt.softmax_times(rows)
    fused = times["fused_attention"] > 0
    flops = softmax_flops(rows, model, flop_source)
    no_flops = None if flop_source else "no FLOPs: no operator shapes and no FLOP document"
    parts = None
    soft_ns: int | None
    mat_ns: int | None
    kernel_ns: int | None = None
    kernel_flop: int | None = None
    softmax_rows = rows.filter(pl.col("category") == "softmax")
    if rows.select(rt.in_attention_module().any()).item():
        source: str | None = "modules"
        soft_ns, mat_ns = times["attention_softmax"], times["attention_matmul"]
        soft_flop, mat_flop = flops["attention_softmax"], flops["attention_matmul"]
        kernel_ns, kernel_flop = mat_ns, mat_flop
        covered = _phases(rows, rt.in_attention_module() | (pl.col("category") == "attention"))
        attention_softmax = rows.filter(
            rt.in_attention_module() & (pl.col("category") == "softmax")
        )
    else:
        parts = attention_parts(rows)
        source = "ranges" if parts is not None else None
        soft_ns = mat_ns = None  # unknown without attention modules or ranges
        soft_flop = mat_flop = None
        covered = [] if parts is None else _phases(rows, parts.is_not_null())
        attention_softmax = rows.clear()
        if parts is not None:
            sums = rows.select("dur_ns").with_columns(part=parts)
            soft_ns = int(sums.filter(pl.col("part") == "softmax")["dur_ns"].sum())
            mat_ns = int(sums.filter(pl.col("part") == "matmul")["dur_ns"].sum())
            kernel_ns, kernel_flop = _kernel_side(rows, parts == "matmul")
            attention_softmax = rows.filter(parts == "softmax")
            if flop_source == "shapes":
                soft_flop, mat_flop = _range_flops(rows, parts)
            elif flop_source == "model":
                no_flops = "the model's FLOP document has no ranges: FLOPs by range unknown"
                kernel_flop = None
    time_why = NO_ATTENTION if source is None else (FUSED if fused and not soft_ns else None)
    flop_why = NO_ATTENTION if source is None else _flop_why(no_flops, fused, soft_flop)
    every_time_why = FUSED if fused and not times["softmax"] else None
    every_flop_why = _flop_why(no_flops, fused, flops["softmax"])
    if source is None:
        every_time_why = every_flop_why = NO_ATTENTION
    elif kernel_flop is None and not every_flop_why:
        every_flop_why = no_flops or NO_KERNEL_FLOPS
    attention_time = _ratio_entry(soft_ns, mat_ns, "ns", time_why)
    attention_time["matmul_kernel_ns"] = kernel_ns
    attention_time["kernel_ratio"] = None if time_why else rt.share(soft_ns, kernel_ns)
    attention_time["whole_ranges"] = source == "ranges"
    attention_flops = _ratio_entry(soft_flop, mat_flop, "flop", flop_why)
    attention_flops["per_element"] = _per_element(attention_softmax, flop_source)
    category_flops = _ratio_entry(flops["softmax"], kernel_flop, "flop", every_flop_why)
    category_flops["per_element"] = _per_element(softmax_rows, flop_source)
    return {
        "question": "How does softmax compare with the attention matmuls, in time and FLOPs?",
        "scope": "step",
        "attention_source": source,
        # The phases the attention work counted ran in, and those of the whole scope: ranges
        # around attention may mark only the forward pass.
        "attention_phases": covered,
        "step_phases": _phases(rows, pl.lit(True)),
        "attention": {"time": attention_time, "flops": attention_flops},
        # Softmax kernels (category softmax) against the attention matmuls' kernels.
        "by_kernel_category": {
            "time": _ratio_entry(times["softmax"], kernel_ns, "ns", every_time_why),
            "flops": category_flops,
        },
        "fused_attention_ns": times["fused_attention"],
        "flop_source": flop_source,
    }
