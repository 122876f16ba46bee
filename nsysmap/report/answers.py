"""`nsysmap report`: answers to the questions people profile a model for (pure).

Frames in (ops.parquet, the manifest, the model's FLOP table), frames and
Markdown out; reading and writing live in nsysmap.report.report_files. Every number
comes with the data behind it, and what the data cannot answer is said
plainly (nsysmap.report.markdown renders it; docs/report.md documents the
tables).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from nsysmap.core.units import cpu_trace, unrecorded_gpu_work
from nsysmap.flops.aten_flops import with_shape_flops
from nsysmap.flops.peaks import normalise_dtype, peak_tflops
from nsysmap.report import flops_time as rf
from nsysmap.report import range_answers as rr
from nsysmap.report import scope_tables as rt
from nsysmap.report import scopes as rs
from nsysmap.report.blocks import blocks as block_parts
from nsysmap.report.operator_shapes import asked_shapes, shapes_table, softmax_flops
from nsysmap.report.passes import manifest_rules, measure_rules, rule_notes
from nsysmap.structure.model import build_structure
from nsysmap.structure.ranges import ranges_from_ops
from nsysmap.structure.table import assign
from nsysmap.structure.words import COUNTED_PASS, EVIDENCE_WORDS

FLOP_SOURCES = ("auto", "shapes", "model", "none")
REPORT_DEVICES = pl.Schema(
    {
        "device_id": pl.Int64,
        "device_name": pl.String,
        "dtype": pl.String,  # fp32, tf32, fp16, bf16, or null when unknown
        "peak_tflops": pl.Float64,
        "peak_note": pl.String,  # where the peak comes from, or why there is none
    }
)
REPORT_SUMMARY = pl.Schema(
    {
        "run": pl.String,  # "main" or "compare"
        "metric": pl.String,
        "scope": pl.String,
        "value": pl.Float64,
    }
)


@dataclass(frozen=True)
class RunData:
    """One analysed run as `nsysmap report` reads it from its directory."""

    label: str
    ops: pl.DataFrame
    manifest: dict[str, Any]
    model_flops: pl.DataFrame | None = None
    model_info: dict[str, Any] | None = None
    by_range: pl.DataFrame | None = None  # None: written by an nsysmap without it
    by_inferred_block: pl.DataFrame | None = None  # None: not inferred (--no-infer)
    waits: dict[str, pl.DataFrame] | None = None  # idle / stream_idle / launch_cost tables
    structure: pl.DataFrame | None = None  # STRUCTURE; None: found again from `ops`
    structure_note: str | None = None  # why the structure was found again, if it was
    findings: pl.DataFrame | None = None  # findings.parquet; None: written before it


@dataclass(frozen=True)
class ReportOptions:
    """Choices of the command line."""

    dtype: str | None = None  # compute dtype for the peak: fp32, tf32, fp16, bf16
    peak_tflops: float | None = None  # overrides the table of peaks
    device_name: str | None = None  # overrides the report's GPU name
    flops: str = "auto"  # FLOP_SOURCES
    show_shapes: bool = False  # the full per-module shape table in the Markdown


@dataclass(frozen=True)
class Findings:
    """Everything computed for one run."""

    run: RunData
    backend: str
    ops_f: pl.DataFrame
    source: str | None
    source_note: str
    devices: pl.DataFrame
    module_phase: pl.DataFrame
    layers: pl.DataFrame
    phases: pl.DataFrame
    categories: pl.DataFrame
    top: pl.DataFrame
    non_matmul: pl.DataFrame
    shapes: pl.DataFrame
    asked: pl.DataFrame
    matmul: dict[str, tuple[int, int]]
    softmax_time: dict[str, int]
    softmax_flop: dict[str, int | None]
    steps: int | None
    forward_passes: int | None
    wall: dict[str, float | None]
    ranges: pl.DataFrame | None = None  # REPORT_RANGES; None without by_range
    attention_source: str | None = None  # "modules", "ranges" or None
    notes: list[str] = field(default_factory=list)
    blocks: pl.DataFrame = field(default_factory=pl.DataFrame)  # REPORT_BLOCKS
    kind: str = ""  # what the run is: see run_kind
    passes_source: str | None = None  # where forward_passes come from: steps or ranges
    answers: dict[str, Any] = field(default_factory=dict)  # answers.json (answer_doc)

    @property
    def cpu_only(self) -> bool:
        """Whether the run's times are CPU operator self time, not GPU time: a trace
        without GPU work, as its reader recorded (the terminal summary's unit)."""
        return cpu_trace(_reader_meta(self.run))


def choose_source(
    ops_f: pl.DataFrame, model: pl.DataFrame | None, requested: str
) -> tuple[str | None, str]:
    """(flop source or None, the sentence saying where FLOPs come from or why none)."""
    shaped = ops_f.filter(pl.col("flop_kind").is_in(["matmul", "attention"]))
    has_shapes, stepped = not shaped.is_empty(), rt.has_steps(ops_f)
    if requested == "none":
        return None, "FLOPs not computed (--flops none)"
    if requested in ("auto", "shapes") and has_shapes:
        return "shapes", "FLOPs from the operators' recorded input shapes"
    if requested in ("auto", "model") and model is not None and stepped:
        return "model", "FLOPs from the profiled model's FLOP document (flops.parquet), per step"
    why = []
    if requested != "model":
        why.append("no matmul operator carries recorded input shapes")
    if requested != "shapes":
        why.append(
            "no FLOP document of the model (flops.parquet)"
            if model is None
            else "no step ranges to scale the per-step FLOP document"
        )
    return None, "no FLOPs: " + "; ".join(why)


def device_peaks(run: RunData, options: ReportOptions, dtype: str | None) -> pl.DataFrame:
    """REPORT_DEVICES for the devices that ran operations."""
    named = {
        d.get("device_id"): d.get("name")
        for d in run.manifest.get("devices") or []
        if isinstance(d, dict)
    }
    rows = []
    for device in sorted(run.ops["device_id"].drop_nulls().unique().to_list()):
        name = options.device_name or named.get(device)
        if device < 0:
            peak, note = None, "CPU backend: time is CPU self time, no MFU"
        elif options.peak_tflops is not None:
            peak, note = options.peak_tflops, f"peak given: {options.peak_tflops:g} TFLOP/s"
        else:
            peak, note = peak_tflops(name, dtype)
        rows.append((device, name, dtype, peak, note))
    return pl.DataFrame(rows, schema=REPORT_DEVICES, orient="row")


def _reader_meta(run: RunData) -> dict[str, Any]:
    """What the reader recorded (a torch.profiler trace's compute dtype, ...)."""
    meta = run.manifest.get("report_meta")
    return meta if isinstance(meta, dict) else {}


def placed_run(run: RunData) -> RunData:
    """`run` with its structure (found from its operations alone where it came without
    one) and each operation's place in it (nsysmap.structure.table.assign)."""
    structure = run.structure
    if structure is None:
        rules, measure = manifest_rules(run.manifest), measure_rules(run.manifest)
        ranges = ranges_from_ops(run.ops)
        structure = build_structure(run.ops, ranges, rules=rules, measure=measure)
    return replace(run, ops=assign(run.ops, structure), structure=structure)


def analyse_run(run: RunData, options: ReportOptions, label: str = "main") -> Findings:
    """All tables and numbers for one run."""
    run = placed_run(run)
    ops_f = with_shape_flops(run.ops)
    source, source_note = choose_source(ops_f, run.model_flops, options.flops)
    model = run.model_flops if source == "model" else None
    info = run.model_info or {}
    dtype = normalise_dtype(options.dtype) or normalise_dtype(info.get("compute_dtype"))
    dtype = dtype or normalise_dtype(_reader_meta(run).get("compute_dtype"))
    devices = device_peaks(run, options, dtype)
    module_phase = rf.module_phase(ops_f, model, source, devices)
    softmax_time, attention_source = rr.attention_from(run.ops)
    shapes = shapes_table(ops_f)
    forward = rs.describe(run.ops, run.structure, "forward") if run.structure is not None else {}
    forward_passes = forward.get("passes")
    said = [EVIDENCE_WORDS.get(e, e) for e in forward.get("evidence") or []]
    passes_source = ", ".join(said) if forward_passes else None
    findings = Findings(
        run=run,
        backend=str(run.manifest.get("backend") or "unknown"),
        ops_f=ops_f,
        source=source,
        source_note=source_note,
        devices=devices,
        module_phase=module_phase,
        layers=rf.layers(module_phase),
        blocks=block_parts(module_phase),
        phases=rf.phases(module_phase),
        categories=rf.categories(ops_f, model, source),
        top=rt.top_kernels(run.ops, label, forward_passes=forward_passes),
        non_matmul=rt.non_matmul_kernels(run.ops),
        shapes=shapes,
        asked=asked_shapes(shapes),
        matmul=rt.matmul_shares(run.ops),
        softmax_time=softmax_time,
        softmax_flop=softmax_flops(ops_f, model, source),
        steps=rt.passes(rt.scope_filter(run.ops, "step")),
        forward_passes=forward_passes,
        passes_source=passes_source,
        wall=rf.step_wall(ops_f, module_phase, source),
        ranges=rr.range_table(run.by_range),
        attention_source=attention_source,
    )
    return replace(findings, notes=limitations(findings), kind=run_kind(run.ops))


FORWARD_ONLY = "forward-only run"


def run_kind(ops: pl.DataFrame) -> str:
    """What a run is, from its operations: forward-only, training, or unknown.

    A run with any operation in a backward phase or of backward direction is
    not forward-only, whatever it was given as.
    """
    backward = ops.filter((pl.col("phase") == "backward") | (pl.col("direction") == "backward"))
    total = int(ops["dur_ns"].sum())
    if backward.height:
        share = int(backward["dur_ns"].sum()) / total if total else 0.0
        return f"training run: backward is {100 * share:.1f} % of its time"
    if ops["phase"].is_null().all() and ops["direction"].is_null().all():
        return "run without phase ranges: forward-only or not is unknown"
    return FORWARD_ONLY


def run_label(f: Findings) -> str:
    """The compared run's name in tables: "forward-only run" only when it is one."""
    return FORWARD_ONLY if f.kind == FORWARD_ONLY else "compared run"


def compare_notes(c: Findings) -> list[str]:
    if c.kind == FORWARD_ONLY:
        return c.notes
    return [
        f"It is not known to be forward-only ({c.kind}); its numbers are compared as they are.",
        *c.notes,
    ]


# Host-to-device copies above this share of a capture without ranges earn a note.
HOST_COPIES_NOTE = 0.1


def _host_copies_share(ops: pl.DataFrame) -> float:
    """Share of all time in host-to-device copies."""
    total = int(ops["dur_ns"].sum())
    htod = pl.col("name").str.contains(r"(?i)htod|host ?-?> ?device").fill_null(False)
    copies = int(ops.filter((pl.col("kind").cast(pl.String) == "memcpy") & htod)["dur_ns"].sum())
    return copies / total if total else 0.0


def _impossible_rates(f: Findings) -> list[str]:
    """A layer faster than its device's peak: its FLOPs cannot be those of its kernels."""
    over = f.layers.filter(pl.col("mfu") > 1).sort("mfu", descending=True)
    if over.is_empty():
        return []
    worst = over.row(0, named=True)
    return [
        f"FLOPs do not fit the time in {over.height} layer(s): `{worst['layer']}` would run at "
        f"{100 * worst['mfu']:.1f} % of the device's peak. The operator shapes recorded for "
        "those kernels cannot be theirs, so their TFLOP/s and MFU are not to be trusted."
    ]


def _structure_limits(f: Findings) -> list[str]:
    """What the structure leaves unknown: steps, passes, the measured region."""
    notes = []
    ops, structure = f.run.ops, f.run.structure
    if f.run.structure_note:
        notes.append(f.run.structure_note)
    if f.steps is None:
        notes.append("No steps in the measured region: per-step counts are unknown.")
    passes = structure is not None and bool(structure.select(COUNTED_PASS.any()).item())
    if not passes:
        notes.append(
            "No pass found (no step, phase or forward range, no record, and no forward or "
            "backward pass in the kernel sequence, whatever blocks repeat in it): the answers "
            "cover the whole capture."
        )
        copies = _host_copies_share(ops)
        if copies >= HOST_COPIES_NOTE:
            notes.append(
                f"No ranges mark the steady state: {100 * copies:.1f} % of the time is "
                "host-to-device copies, often the model's weights and data copied in before "
                "the measured work; whole-capture answers include them (mark the measured "
                "loop with a range, e.g. NVTX `step N` or `forward`, to leave them out)."
            )
    if rt.scope_filter(ops, "forward").is_empty():
        notes.append(
            "No forward pass measured: no forward-only share, top kernel or calls per pass."
        )
    if structure is not None:
        notes += rule_notes(f.run.manifest, structure)
    return notes


def limitations(f: Findings) -> list[str]:
    """What this run's data cannot answer, one plain sentence each."""
    notes = _structure_limits(f)
    graph = int(f.run.ops.filter(pl.col("kind").cast(pl.String) == "graph")["dur_ns"].sum())
    if graph:
        notes.append(
            "CUDA graph replays were traced whole (nsys --cuda-graph-trace=graph): their "
            "kernels are unknown, so matmul shares and top kernels of scopes holding them are "
            "unknown (bounds are given); profile with --cuda-graph-trace=node to see them."
        )
    if f.source is None:
        notes.append(
            f"No FLOPs, so no TFLOP/s or MFU ({f.source_note.removeprefix('no FLOPs: ')})."
        )
    unrecorded = unrecorded_gpu_work(_reader_meta(f.run))
    if unrecorded:
        rates = "; TFLOP/s are of CPU time" if f.source is not None else ""
        notes.append(f"{unrecorded[:1].upper()}{unrecorded[1:]}{rates}.")
    if f.backend == "torch.profiler" and (f.devices["device_id"] < 0).all():
        notes.append("CPU backend: times are CPU operators' self times; there is no MFU.")
    elif f.source is not None and f.devices["peak_tflops"].is_null().all():
        reasons = sorted(set(f.devices["peak_note"].drop_nulls().to_list()))
        notes.append("No MFU: " + "; ".join(reasons) + ".")
    notes += _impossible_rates(f)
    notes += rr.structure_notes(f.run.ops)
    if f.softmax_time["fused_attention"]:
        notes.append(
            "Fused attention kernels compute their softmax inside: softmax time and FLOPs "
            "there are not separable from the attention matmuls."
        )
    return notes


def summary_rows(f: Findings, run: str) -> pl.DataFrame:
    """REPORT_SUMMARY: the headline numbers in long form."""
    rows: list[tuple[str, str, str, float | None]] = []
    for scope, (matmul, total) in f.matmul.items():
        rows.append((run, "matmul_time_share", scope, rt.share(matmul, total)))
        rows.append((run, "time_ns", scope, float(total)))
    rows.append((run, "steps", "step", _float(f.steps)))
    rows.append((run, "forward_passes", "forward", _float(f.forward_passes)))
    st, sf = f.softmax_time, f.softmax_flop
    for metric, num, den in (
        ("softmax_to_matmul_time_ratio", rt.softmax_time(st, "softmax"), st["matmul"]),
        (
            "attention_softmax_to_matmul_time_ratio",
            rt.softmax_time(st, "attention_softmax"),
            st["attention_matmul"],
        ),
        ("softmax_to_matmul_flop_ratio", _softmax_flop(f, "softmax"), sf["matmul"]),
        (
            "attention_softmax_to_matmul_flop_ratio",
            _softmax_flop(f, "attention_softmax"),
            sf["attention_matmul"],
        ),
    ):
        rows.append((run, metric, "step", rt.share(num, den)))
    pooled = rf.totals(f.module_phase)
    rows.append((run, "matmul_flop", "capture", _float(pooled["matmul_flop"])))
    rows.append((run, "tflops_per_s", "capture", pooled["tflops_per_s"]))
    rows.append((run, "mfu", "capture", pooled["mfu"]))
    for metric, value in f.wall.items():
        rows.append((run, metric, "step", value))
    return pl.DataFrame(rows, schema=REPORT_SUMMARY, orient="row")


def _softmax_flop(f: Findings, key: str) -> int | None:
    """Softmax FLOPs; None when fused attention kernels hold every softmax (their FLOPs
    count the matmuls only)."""
    value = f.softmax_flop[key]
    return None if f.softmax_time["fused_attention"] and not value else value


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
