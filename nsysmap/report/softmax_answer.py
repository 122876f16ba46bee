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

from dataclasses import dataclass, field
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
NO_SOURCE = "no FLOPs: no operator shapes and no FLOP document"
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


@dataclass
class _Attention:
    """What one source of attention says: softmax and matmul time and FLOPs, the matmul
    kernels' alone, the phases it covers and its softmax operations."""

    source: str | None = None  # "modules", "ranges" or None
    soft_ns: int | None = None
    mat_ns: int | None = None
    kernel_ns: int | None = None  # the attention matmuls' kernels alone
    soft_flop: int | None = None
    mat_flop: int | None = None
    kernel_flop: int | None = None
    covered: list[str] = field(default_factory=list)
    softmax_rows: pl.DataFrame | None = None
    no_flops: str | None = None  # why FLOPs are unknown where they are


def _from_modules(rows: pl.DataFrame, times: dict[str, int], flops: dict[str, Any]) -> _Attention:
    """Attention from modules whose class names attention."""
    in_module = rt.in_attention_module()
    return _Attention(
        "modules",
        times["attention_softmax"],
        times["attention_matmul"],
        times["attention_matmul"],
        flops["attention_softmax"],
        flops["attention_matmul"],
        flops["attention_matmul"],
        _phases(rows, in_module | (pl.col("category") == "attention")),
        rows.filter(in_module & (pl.col("category") == "softmax")),
    )


def _from_ranges(rows: pl.DataFrame, flop_source: str | None) -> _Attention:
    """Attention from the profile's own ranges (whole ranges, and their matmul kernels)."""
    parts = attention_parts(rows)
    if parts is None:
        return _Attention()
    sums = rows.select("dur_ns").with_columns(part=parts)
    found = _Attention(
        "ranges",
        int(sums.filter(pl.col("part") == "softmax")["dur_ns"].sum()),
        int(sums.filter(pl.col("part") == "matmul")["dur_ns"].sum()),
        covered=_phases(rows, parts.is_not_null()),
        softmax_rows=rows.filter(parts == "softmax"),
    )
    found.kernel_ns, found.kernel_flop = _kernel_side(rows, parts == "matmul")
    if flop_source == "shapes":
        found.soft_flop, found.mat_flop = _range_flops(rows, parts)
    elif flop_source == "model":
        found.no_flops = "the model's FLOP document has no ranges: FLOPs by range unknown"
        found.kernel_flop = None
    return found


def softmax_vs_matmul(
    ops_f: pl.DataFrame, model: pl.DataFrame | None, flop_source: str | None
) -> dict[str, Any]:
    """The answers.json entry `softmax_vs_matmul`."""
    rows = rt.scope_filter(ops_f, "step")
    times = rt.softmax_times(rows)
    fused = times["fused_attention"] > 0
    flops = softmax_flops(rows, model, flop_source)
    if rows.select(rt.in_attention_module().any()).item():
        a = _from_modules(rows, times, flops)
    else:
        a = _from_ranges(rows, flop_source)
    no_flops = a.no_flops or (None if flop_source else NO_SOURCE)
    return {
        "question": "How does softmax compare with the attention matmuls, in time and FLOPs?",
        "scope": "step",
        "attention_source": a.source,
        # The phases the attention work counted ran in, and those of the whole scope: ranges
        # around attention may mark only the forward pass.
        "attention_phases": a.covered,
        "step_phases": _phases(rows, pl.lit(True)),
        "attention": _attention_rows(a, fused, no_flops, flop_source),
        # Softmax kernels (category softmax) against the attention matmuls' kernels.
        "by_kernel_category": _kernel_rows(a, rows, times, flops, (fused, no_flops, flop_source)),
        "fused_attention_ns": times["fused_attention"],
        "flop_source": flop_source,
    }


def _attention_rows(
    a: _Attention, fused: bool, no_flops: str | None, flop_source: str | None
) -> dict[str, Any]:
    time_why = NO_ATTENTION if a.source is None else (FUSED if fused and not a.soft_ns else None)
    flop_why = NO_ATTENTION if a.source is None else _flop_why(no_flops, fused, a.soft_flop)
    time = _ratio_entry(a.soft_ns, a.mat_ns, "ns", time_why)
    time["matmul_kernel_ns"] = a.kernel_ns
    time["kernel_ratio"] = None if time_why else rt.share(a.soft_ns, a.kernel_ns)
    time["whole_ranges"] = a.source == "ranges"
    flops = _ratio_entry(a.soft_flop, a.mat_flop, "flop", flop_why)
    softmax = a.softmax_rows if a.softmax_rows is not None else pl.DataFrame()
    flops["per_element"] = _per_element(softmax, flop_source)
    return {"time": time, "flops": flops}


def _kernel_rows(
    a: _Attention,
    rows: pl.DataFrame,
    times: dict[str, int],
    flops: dict[str, Any],
    context: tuple[bool, str | None, str | None],
) -> dict[str, Any]:
    fused, no_flops, flop_source = context
    time_why = FUSED if fused and not times["softmax"] else None
    flop_why = _flop_why(no_flops, fused, flops["softmax"])
    if a.source is None:
        time_why = flop_why = NO_ATTENTION
    elif a.kernel_flop is None and not flop_why:
        flop_why = no_flops or NO_KERNEL_FLOPS
    entry = _ratio_entry(flops["softmax"], a.kernel_flop, "flop", flop_why)
    entry["per_element"] = _per_element(rows.filter(pl.col("category") == "softmax"), flop_source)
    return {"time": _ratio_entry(times["softmax"], a.kernel_ns, "ns", time_why), "flops": entry}
