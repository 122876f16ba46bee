"""answers.json: the report's answers as data, the one source of report.md (pure).

`answers_document(findings, compare)` returns a JSON-able dict, versioned by
ANSWERS_SCHEMA_VERSION and documented in docs/report.md::

    {"schema": "nsysmap.answers", "schema_version": "2.4",
     "run": {...}, "compare": {...} | None,
     "structure": {"regions", "measured", "lines", "notes"},
     "scopes": {"forward": {"label", "source", "region", "passes", "steps", "name",
                            "evidence", "ops", "time_ns"}, ...},
     "left_out": [{"what", "time_ns", "share", "why"}],
     "cannot_answer": ["No step ranges: ...", ...],
     "answers": {"findings": {...}, "matmul_share": {...}, "top_kernel": {...},
                 "non_matmul_kernels": {...},
                 "copies": {...}, "softmax_vs_matmul": {...}, "communication": {...},
                 "waits": {...},
                 "flop_rate": {...}, "phase_time": {...},
                 "layer_time": {...}, "ranges": {...},
                 "blocks": {...}, "inferred_blocks": {...}, "categories": {...},
                 "shapes": {...}}}

Times are integer nanoseconds, FLOPs integer counts, shares fractions 0..1;
a value the profile cannot give is null beside an `unknown` reason.
nsysmap.report.markdown renders the Markdown from this dict alone.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import polars as pl

from nsysmap.infer.summary import CONFIDENCE_WEAK, PLACED_WEAK
from nsysmap.report import questions as q
from nsysmap.report import scope_tables as rt
from nsysmap.report import scopes as structured
from nsysmap.report.blocks import block_totals, part_order
from nsysmap.report.communication import communication_answer
from nsysmap.report.fix_first import fix_first_answer
from nsysmap.report.flops_time import totals
from nsysmap.report.left_out import left_out_of
from nsysmap.report.range_answers import shown_ranges
from nsysmap.report.scopes import describe
from nsysmap.report.softmax_answer import softmax_vs_matmul
from nsysmap.report.waits import waits_answer
from nsysmap.structure.words import EVIDENCE_WORDS, structure_summary
from nsysmap.waits.gaps import GPU

if TYPE_CHECKING:
    from nsysmap.report.answers import Findings

ANSWERS_SCHEMA = "nsysmap.answers"
ANSWERS_SCHEMA_VERSION = "2.4"
LAYER_ROWS = 20  # layers listed, by time
RANGE_ROWS = 15  # ranges by time inside them
OWN_ROWS = 10  # range paths by own time
MAX_PARTS = 6  # block parts with a column of their own


def answers_document(f: Findings, c: Findings | None = None) -> dict[str, Any]:
    """The whole answers.json of one report (and its compared run)."""
    answers: dict[str, Any] = {
        "findings": fix_first_answer(f.run.findings),
        "matmul_share": q.matmul_share(f.run.ops),
        "top_kernel": q.top_kernel(f.run.ops, f.forward_passes, f.passes_source),
        "non_matmul_kernels": q.non_matmul_kernels(f.run.ops, rt.NON_MATMUL_MIN_SHARE),
        "copies": q.copies(f.run.ops),
        "softmax_vs_matmul": softmax_vs_matmul(f.ops_f, f.run.model_flops, f.source),
        "flop_rate": flop_rate(f),
        "phase_time": phase_time(f),
        "layer_time": layer_time(f),
        "communication": communication_answer(f.run.ops),
        "waits": _waits(f),
        "ranges": ranges(f),
        "blocks": blocks(f),
        "inferred_blocks": inferred_blocks(f),
        "categories": categories(f),
        "shapes": shapes(f),
    }
    if c is not None:
        _add_compare(answers, c)
    doc = {
        "schema": ANSWERS_SCHEMA,
        "schema_version": ANSWERS_SCHEMA_VERSION,
        "run": run_facts(f),
        "compare": run_facts(c) if c is not None else None,
        "structure": structure_facts(f),
        "scopes": scope_facts(f),
        "left_out": left_out(f.run.ops, f.run.structure),
        "cannot_answer": list(f.notes),
        "compare_cannot_answer": list(c.notes) if c is not None else [],
        "answers": answers,
    }
    return clean(doc)


def clean(value: Any) -> Any:
    """`value` with NaN and infinite floats as None, tuples as lists (valid JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def run_facts(f: Findings) -> dict[str, Any]:
    """What the run is: backend, devices, steps, forward passes, FLOP source, peaks."""
    warmup = f.run.ops.filter(rt.is_warmup())
    return {
        "label": f.run.label,
        "backend": f.backend,
        "kind": f.kind,
        "devices": f.devices.to_dicts(),
        "steps": f.steps,
        "steps_source": _steps_source(f) if f.steps is not None else None,
        "phases_source": rt.label_source(f.run.ops, "phase") if rt.has_phases(f.run.ops) else None,
        "steps_run": _option(f, "steps_seen"),
        "steps_profiled": _option(f, "profiled_steps"),
        "warmup_ops": warmup.height,
        "warmup_time_ns": int(warmup["dur_ns"].sum()),
        "forward_passes": f.forward_passes,
        "forward_passes_source": f.passes_source,
        "flop_source": f.source,
        "flop_note": f.source_note,
        "peak_notes": sorted(set(f.devices["peak_note"].drop_nulls().to_list())),
        "time_ns": int(f.run.ops["dur_ns"].sum()),
        "ops": f.run.ops.height,
    }


def _measured_steps(f: Findings) -> list[int] | None:
    """The step labels of the measured steps (the waits' windows), None without a structure."""
    if f.run.structure is None:
        return None
    steps = f.run.structure.filter(
        (pl.col("kind") == "step") & (pl.col("region") == "measured") & pl.col("step").is_not_null()
    )
    return sorted(int(s) for s in steps["step"].unique())


def _waits(f: Findings) -> dict[str, Any]:
    """The waits answer over the measured steps, else the measured region (docs/waits.md)."""
    measured = _measured_steps(f)
    region = None if measured else _measured_region(f)
    return waits_answer(f.run.waits, f.run.ops, measured, region)


def _measured_region(f: Findings) -> pl.DataFrame | None:
    """Every operation of the measured region (the waits' window when it has no measured
    step labels: all the work the GPU ran there), where the region leaves out some of
    the capture's GPU work (set-up, warm-up); else None."""
    ops = f.run.ops
    if f.run.structure is None or "s_region" not in ops.columns:
        return None
    region = ops.filter(pl.col("s_region") == structured.MEASURED)
    inside = region.filter(GPU).height
    return region if 0 < inside < ops.filter(GPU).height else None


def _steps_source(f: Findings) -> str:
    """Where the measured steps come from, in words."""
    structure = f.run.structure
    if structure is None:
        return rt.label_source(f.run.ops, "step")
    steps = structure.filter((pl.col("kind") == "step") & (pl.col("region") == "measured"))
    evidence = sorted({e for text in steps["evidence"].drop_nulls() for e in text.split(", ")})
    return _evidence_words(evidence)


def _option(f: Findings, key: str) -> Any:
    """A setting `nsysmap run` recorded in manifest.json (None for other inputs)."""
    options = f.run.manifest.get("options")
    return options.get(key) if isinstance(options, dict) else None


def structure_facts(f: Findings) -> dict[str, Any] | None:
    """The structure model's regions, steps and passes in counts and sentences."""
    if f.run.structure is None:
        return None
    return structure_summary(f.run.structure, int(f.run.ops["dur_ns"].sum()), cpu=f.cpu_only)


def scope_facts(f: Findings) -> dict[str, Any]:
    """Each scope the profile has: its name (its instances in the structure), where it
    comes from, its operations and time."""
    ops, structure = f.run.ops, f.run.structure
    out = {}
    for scope in q.present_scopes(ops):
        rows = rt.scope_filter(ops, scope)
        named: dict[str, Any] = (
            {"label": rt.scope_label(ops, scope)}
            if structure is None
            else describe(ops, structure, scope)
        )
        out[scope] = {
            **named,
            "source": _evidence_words(named.get("evidence"))
            if structure is not None
            else rt.scope_source(ops, scope),
            "ops": rows.height,
            "time_ns": int(rows["dur_ns"].sum()),
        }
    return out


def _evidence_words(evidence: list[str] | None) -> str:
    return ", ".join(EVIDENCE_WORDS.get(e, e) for e in evidence or []) or "nothing"


def left_out(ops: pl.DataFrame, structure: pl.DataFrame | None = None) -> list[dict[str, Any]]:
    """What the step scope leaves out of all time, and why."""
    if structure is not None and "s_region" in ops.columns:
        return left_out_of(ops, structure)
    total = int(ops["dur_ns"].sum())
    out = []
    warm = int(ops.filter(rt.is_warmup())["dur_ns"].sum())
    if warm:
        out.append(("warm-up work", warm, "work in warm-up ranges is not the steady state"))
    basis = rt.step_basis(ops)
    column = {"steps": "step", "phases": "phase"}.get(basis)
    if column:
        outside = ops.with_columns(early=_launched_before_the_capture(ops)).filter(
            pl.col(column).is_null() & ~rt.is_warmup()
        )
        before = int(outside.filter("early")["dur_ns"].sum())
        rest = int(outside["dur_ns"].sum()) - before
        where = "every step" if column == "step" else "every phase"
        why = (
            "work outside the measured steps or phases (initialisation, weight copies, "
            "set-up) is not the steady state"
        )
        if before:
            out.append(("work launched before the capture", before, _BEFORE_THE_CAPTURE))
        if rest:
            out.append((f"work outside {where}", rest, why))
    return [
        {"what": what, "time_ns": ns, "share": rt.share(ns, total), "why": why}
        for what, ns, why in out
    ]


_BEFORE_THE_CAPTURE = (
    "the GPU ran it as the capture began, launched before it: the tail of a step the"
    " profile does not hold"
)


def _launched_before_the_capture(ops: pl.DataFrame) -> pl.Expr:
    """GPU work without a launch call in a process whose other work has one."""
    if "launch_start_ns" not in ops.columns:
        return pl.lit(False)
    launched = pl.col("launch_start_ns").is_not_null()
    return ~launched & launched.any().over("pid")


def flop_rate(f: Findings) -> dict[str, Any]:
    """Matmul FLOPs over the time of the operations whose FLOPs could be counted."""
    pooled = totals(f.module_phase)
    time, counted = pooled.get("time_ns"), pooled.get("flop_time_ns")
    unknown = None if f.source else f.source_note
    return {
        "question": "What matmul throughput (TFLOP/s) and MFU does the run reach?",
        "flop_source": f.source,
        "matmul_flop": pooled.get("matmul_flop") if f.source else None,
        "time_ns": time,
        "flop_time_ns": counted if f.source else None,
        "flop_time_share": rt.share(counted, time) if f.source else None,
        "tflops_per_s": pooled.get("tflops_per_s") if f.source else None,
        "mfu": pooled.get("mfu") if f.source else None,
        "step_wall_ns": f.wall.get("step_wall_ns"),
        "mfu_step_wall": f.wall.get("mfu_step_wall"),
        "unknown": unknown,
    }


def phase_time(f: Findings) -> dict[str, Any]:
    total = int(f.phases["time_ns"].sum())
    return {
        "question": "Where does the time go per training phase?",
        "time_ns": total,
        "all_time_ns": int(f.run.ops["dur_ns"].sum()),
        "phases": f.phases.to_dicts(),
        "unknown": None if rt.has_phases(f.run.ops) else "no phase ranges in this profile",
    }


def layer_time(f: Findings) -> dict[str, Any]:
    has_modules = bool(f.run.ops["module"].is_not_null().any())
    return {
        "question": "Where does the time go per layer, against the FLOPs each layer does?",
        "per_step": f.steps,
        "layers_total": f.layers.height,
        "layers": f.layers.head(LAYER_ROWS).to_dicts(),
        "unknown": None if has_modules else "no module records or module ranges in this profile",
    }


def ranges(f: Findings) -> dict[str, Any]:
    table = f.ranges
    if table is None:
        return {
            "unknown": "no by_range.parquet here (written by an older nsysmap): run "
            "`nsysmap attribute` again for this section"
        }
    shown = shown_ranges(table)
    own = table.filter(pl.col("time_ns") > 0)
    own = own.sort(["time_ns", "range_path"], descending=[True, False]).head(OWN_ROWS)
    return {
        "user_ranges_only": shown.height < table.height,
        "inside": shown.head(RANGE_ROWS).to_dicts(),
        "own": own.to_dicts(),
        "unknown": None if table.height else "no operation was launched inside a range",
    }


def blocks(f: Findings) -> dict[str, Any]:
    if f.blocks.is_empty():
        return {"unknown": "no numbered modules (blocks such as transformer.h.0)", "rows": []}
    parts = part_order(f.blocks)
    shown, rest = parts[:MAX_PARTS], parts[MAX_PARTS:]
    per_part = {(r["block"], r["part"]): r["time_ns"] for r in f.blocks.iter_rows(named=True)}
    rows = []
    for r in block_totals(f.module_phase).to_dicts():
        r["parts_ns"] = {p: per_part.get((r["block"], p), 0) for p in shown}
        r["other_parts_ns"] = sum(per_part.get((r["block"], p), 0) for p in rest) if rest else None
        rows.append(r)
    return {"per_step": f.steps, "parts": shown, "rows": rows, "unknown": None}


def inferred_blocks(f: Findings) -> dict[str, Any]:
    table = f.run.by_inferred_block
    if table is None or table.is_empty() or not f.blocks.is_empty():
        return {"shown": False, "devices": []}
    devices = []
    for (device,), rows in table.group_by("device_id", maintain_order=True):
        placed = rows.filter(pl.col("inferred_block").is_not_null())["time_share"].sum()
        devices.append(
            {"device_id": device, "placed_share": placed, **_weak(rows), "rows": rows.to_dicts()}
        )
    return {"shown": True, "devices": devices}


def _weak(rows: pl.DataFrame) -> dict[str, Any]:
    """`confidence`, `weak` and `blocks_found` of a device's by_inferred_block rows, weak as
    the terminal's line is (nsysmap.infer.summary): no repeating blocks, a confidence
    below CONFIDENCE_WEAK, or less than PLACED_WEAK of the time placed in a pass's region."""
    sure = _confidence(rows)
    regions = rows.filter(pl.col("inferred_region").is_not_null())["time_share"].sum()
    blocks = bool(rows["inferred_block"].is_not_null().any())
    weak = sure is not None and (not blocks or sure < CONFIDENCE_WEAK or regions < PLACED_WEAK)
    shown = None if sure is None else round(sure, 2)  # as report.md prints it
    return {"confidence": shown, "weak": weak, "blocks_found": blocks}


def _confidence(rows: pl.DataFrame) -> float | None:
    """A device's inference confidence: its rows' confidences weighted by their time (None
    where by_inferred_block.parquet has none: written before it did)."""
    if "confidence" not in rows.columns or rows["confidence"].is_null().all():
        return None
    known = rows.filter(pl.col("confidence").is_not_null())
    total = int(known["time_ns"].sum())
    if total <= 0:
        return float(known["confidence"].mean())  # type: ignore[arg-type]
    return float((known["confidence"] * known["time_ns"]).sum() / total)


def categories(f: Findings) -> dict[str, Any]:
    return {
        "scope": "step",
        "time_ns": int(f.categories["time_ns"].sum()),
        "all_time_ns": int(f.run.ops["dur_ns"].sum()),
        "rows": f.categories.to_dicts(),
    }


def shapes(f: Findings) -> dict[str, Any]:
    return {
        "asked": f.asked.to_dicts(),
        "every_module": f.shapes.to_dicts(),
        "unknown": None if f.asked.height else "no operator carries recorded input shapes",
    }


def _add_compare(answers: dict[str, Any], c: Findings) -> None:
    """The compared run's matmul shares and top kernels beside this run's."""
    answers["matmul_share"]["compare"] = q.matmul_share(c.run.ops)["scopes"]
    other = q.top_kernel(c.run.ops, c.forward_passes, c.passes_source)
    answers["top_kernel"]["compare"] = other["scopes"]
    mine = answers["top_kernel"]["scopes"].get("step") or {}
    theirs = other["scopes"].get("step") or {}
    known = mine.get("name") is not None and theirs.get("name") is not None
    answers["top_kernel"]["same_in_compare"] = (
        mine.get("name") == theirs.get("name") if known else None
    )
