"""FLOPs joined with measured time: per module and phase, per layer, phase and category.

Two sources of FLOPs, one per report (`flop_source`):

* `shapes`: every operation's own FLOPs from its recorded input shapes
  (nsysmap.flops.aten_flops), summed over the operations of each group.
* `model`: the profiled model's FLOP document (flops.parquet, one step,
  exclusive per module and direction), matched on (module, phase = direction)
  and multiplied by the number of steps in which that device ran that phase.

    achieved TFLOP/s = matmul_flop / time           (hardware matmul work)
    MFU              = (matmul_flop − recompute_flop) / time / dense peak

time is `flop_time_ns`: the summed duration of the group's operations whose
FLOPs could be counted (CPU self time on the CPU backend, where there is no
MFU). With `shapes` those are the operations whose PyTorch operator is known
(a kernel with no launch call or outside every operator range has no
shapes, so neither its FLOPs nor its time count); with `model`, all of them.
Pooled rows (several devices) divide by the summed capacity Σ time·peak.
"""

from __future__ import annotations

import polars as pl

from nsysmap.attribution.module_names import layer_path
from nsysmap.core.schemas import DIRECTIONS
from nsysmap.flops.module_flops import RECOMPUTE_PARTS
from nsysmap.report.scope_tables import passes, scope_filter

_FLOPS = ("matmul_flop", "recompute_flop", "other_flop_estimate")
# Time by call direction (the ops' `direction`, as in by_module), whatever the phase:
# `forward_ns` is time in forward calls, `backward_ns` in backward calls.
DIRECTION_TIME = {f"{d}_ns": pl.Int64 for d in DIRECTIONS}
REPORT_MODULE_PHASE = pl.Schema(
    {
        "device_id": pl.Int64,
        "module": pl.String,
        "module_class": pl.String,
        "phase": pl.String,
        "ops": pl.Int64,
        "time_ns": pl.Int64,
        "flop_time_ns": pl.Int64,  # time of the operations whose FLOPs could be counted
        **DIRECTION_TIME,
        "matmul_flop": pl.Int64,
        "recompute_flop": pl.Int64,
        "other_flop_estimate": pl.Int64,
        "flop_source": pl.String,  # "shapes", "model" or null
        "peak_tflops": pl.Float64,  # the device's dense peak for the dtype, null when unknown
        "tflops_per_s": pl.Float64,
        "mfu": pl.Float64,
    }
)
_POOLED_TAIL = {
    "time_ns": pl.Int64,
    "flop_time_ns": pl.Int64,
    "matmul_flop": pl.Int64,
    "recompute_flop": pl.Int64,
    "other_flop_estimate": pl.Int64,
    "tflops_per_s": pl.Float64,
    "mfu": pl.Float64,
}
REPORT_LAYERS = pl.Schema(
    {
        "layer": pl.String,  # module path, numbered children as "*": transformer.h.*.attn
        "module_class": pl.String,
        "modules": pl.Int64,  # distinct module paths in the layer
        "ops": pl.Int64,
        **DIRECTION_TIME,
        **_POOLED_TAIL,
    }
)
REPORT_PHASES = pl.Schema(
    {
        "phase": pl.String,
        "ops": pl.Int64,
        "time_ns": pl.Int64,
        "time_share": pl.Float64,  # of all operations' time
        **{name: dtype for name, dtype in _POOLED_TAIL.items() if name != "time_ns"},
    }
)
REPORT_CATEGORY = pl.Schema(
    {
        "category": pl.String,
        "ops": pl.Int64,
        "time_ns": pl.Int64,
        "time_share": pl.Float64,  # of the full step's time
        "matmul_flop": pl.Int64,
        "other_flop_estimate": pl.Int64,
        "flop_share": pl.Float64,  # (matmul + other) / all FLOPs of the full step
    }
)
# Kinds of the FLOP document -> kernel categories (docs/flops.md, docs/outputs.md).
KIND_CATEGORY = {
    "matmul": "gemm",
    "attention": "attention",
    "softmax": "softmax",
    "norm": "normalization",
    "pointwise": "elementwise",
    "dropout": "elementwise",
    "embedding": "elementwise",
    "reduction": "reduction",
    "loss": "other",
}


def _sum_or_null(column: str) -> pl.Expr:
    """Sum within a group, null when every value is null (no FLOPs known)."""
    values = pl.col(column)
    return pl.when(values.is_not_null().any()).then(values.sum()).alias(column)


def _time() -> list[pl.Expr]:
    """Operations, their time, and their time in forward and in backward calls."""
    direction = pl.col("direction").cast(pl.String)
    return [
        pl.len().alias("ops"),
        pl.col("dur_ns").sum().alias("time_ns"),
        *(pl.col("dur_ns").filter(direction == d).sum().alias(f"{d}_ns") for d in DIRECTIONS),
    ]


def shapes_module_phase(ops_f: pl.DataFrame) -> pl.DataFrame:
    """Time and shape-based FLOPs per (device, module, class, phase)."""
    counted = pl.col("dur_ns").filter(pl.col("aten_op").is_not_null()).sum()
    grouped = ops_f.group_by("device_id", "module", "module_class", "phase").agg(
        *_time(), counted.alias("flop_time_ns"), *map(_sum_or_null, _FLOPS)
    )
    known = pl.col("matmul_flop").is_not_null()
    return grouped.with_columns(flop_source=pl.when(known).then(pl.lit("shapes")))


def model_module_phase(ops: pl.DataFrame, model: pl.DataFrame) -> pl.DataFrame:
    """Time per (device, module, class, phase) joined with the model's FLOPs × steps."""
    time = ops.group_by("device_id", "module", "module_class", "phase").agg(*_time())
    steps = (
        ops.filter(pl.col("step").is_not_null())
        .group_by("device_id", "phase")
        .agg(pl.col("step").n_unique().alias("steps"))
    )
    recompute = pl.col("matmul_flop").filter(pl.col("part").is_in(RECOMPUTE_PARTS)).sum()
    per_step = (
        model.with_columns(phase=pl.col("direction").cast(pl.String))
        .group_by("module", "phase")
        .agg(
            pl.col("module_class").first().alias("m_class"),
            pl.col("matmul_flop").sum(),
            recompute.alias("recompute_flop"),
            pl.col("other_flop_estimate").sum(),
        )
    )
    scaled = per_step.join(steps, on="phase").with_columns(pl.col(_FLOPS) * pl.col("steps"))
    joined = time.join(
        scaled.drop("steps"),
        on=["device_id", "module", "phase"],
        how="full",
        coalesce=True,
        nulls_equal=True,
    )
    return joined.with_columns(
        pl.coalesce("module_class", "m_class").alias("module_class"),
        pl.col("ops", "time_ns", *DIRECTION_TIME).fill_null(0),
        pl.col("time_ns").fill_null(0).alias("flop_time_ns"),
        flop_source=pl.when(pl.col("matmul_flop").is_not_null()).then(pl.lit("model")),
    ).drop("m_class")


def with_rates(frame: pl.DataFrame) -> pl.DataFrame:
    """Add tflops_per_s and mfu from matmul FLOPs, their time and `peak_tflops`."""
    time = pl.when(pl.col("flop_time_ns") > 0).then(pl.col("flop_time_ns"))
    model_flop = pl.col("matmul_flop") - pl.col("recompute_flop").fill_null(0)
    return frame.with_columns(
        tflops_per_s=pl.col("matmul_flop") / time / 1e3,
        mfu=model_flop / time / 1e3 / pl.col("peak_tflops"),
    )


def module_phase(
    ops_f: pl.DataFrame, model: pl.DataFrame | None, source: str | None, peaks: pl.DataFrame
) -> pl.DataFrame:
    """REPORT_MODULE_PHASE rows, largest time first.

    `peaks`: device_id, peak_tflops (null where unknown). `source` None: no FLOPs.
    """
    if source == "model" and model is not None:
        frame = model_module_phase(ops_f, model)
    else:
        frame = shapes_module_phase(ops_f)
        if source != "shapes":
            frame = frame.with_columns(pl.lit(None, pl.Int64).alias(c) for c in _FLOPS)
            frame = frame.with_columns(flop_source=pl.lit(None, pl.String))
    frame = frame.join(peaks.select("device_id", "peak_tflops"), on="device_id", how="left")
    frame = with_rates(frame.cast({"peak_tflops": pl.Float64}))
    ordered = frame.sort(
        ["time_ns", "device_id", "module", "phase"], descending=[True] + [False] * 3
    )
    return ordered.select(REPORT_MODULE_PHASE.names()).cast(REPORT_MODULE_PHASE)


def pooled(
    frame: pl.DataFrame, keys: list[str], extra: list[pl.Expr] | None = None
) -> pl.DataFrame:
    """REPORT_MODULE_PHASE rows summed over `keys` (devices pooled), rates recomputed."""
    if "flop_time_ns" not in frame.columns:  # rows made before the column (all time counted)
        frame = frame.with_columns(flop_time_ns=pl.col("time_ns"))
    capacity = pl.col("flop_time_ns") * pl.col("peak_tflops") * 1e3
    model_flop = pl.col("matmul_flop") - pl.col("recompute_flop").fill_null(0)
    return (
        frame.with_columns(_capacity=capacity, _model=model_flop)
        .group_by(keys)
        .agg(
            pl.col("ops").sum(),
            pl.col("time_ns").sum(),
            pl.col("flop_time_ns").sum(),
            *map(_sum_or_null, [*_FLOPS, "_model"]),
            pl.when(pl.col("_capacity").is_not_null().all()).then(pl.col("_capacity").sum()),
            *(extra or []),
        )
        .with_columns(
            tflops_per_s=pl.col("matmul_flop")
            / pl.when(pl.col("flop_time_ns") > 0).then("flop_time_ns")
            / 1e3,
            mfu=pl.col("_model") / pl.when(pl.col("_capacity") > 0).then("_capacity"),
        )
        .drop("_model", "_capacity")
    )


def totals(frame: pl.DataFrame) -> dict[str, float | None]:
    """All rows pooled: ops, time_ns, FLOPs, tflops_per_s, mfu."""
    row = pooled(frame.with_columns(_all=pl.lit(1)), ["_all"]).row(0, named=True)
    return {key: value for key, value in row.items() if key != "_all"}


def layers(frame: pl.DataFrame) -> pl.DataFrame:
    """Per layer (numbered modules collapsed: nsysmap.attribution.module_names), phases
    and devices pooled, by time; forward_ns and backward_ns by call direction."""
    rows = frame.filter(pl.col("module").is_not_null()).with_columns(layer=layer_path())
    extra = [pl.col("module").n_unique().alias("modules"), pl.col(*DIRECTION_TIME).sum()]
    grouped = pooled(rows, ["layer", "module_class"], extra)
    ordered = grouped.sort(["time_ns", "layer"], descending=[True, False])
    return ordered.select(REPORT_LAYERS.names()).cast(REPORT_LAYERS)


def phases(frame: pl.DataFrame) -> pl.DataFrame:
    """Per phase (null: outside every phase), devices pooled, by time."""
    grouped = pooled(frame, ["phase"])
    total = grouped["time_ns"].sum()
    grouped = grouped.with_columns(time_share=pl.col("time_ns") / total if total else None)
    ordered = grouped.sort(["time_ns", "phase"], descending=[True, False], nulls_last=True)
    return ordered.select(REPORT_PHASES.names()).cast(REPORT_PHASES)


def categories(ops_f: pl.DataFrame, model: pl.DataFrame | None, source: str | None) -> pl.DataFrame:
    """Per kernel category in the full step: share of time next to share of FLOPs."""
    rows = scope_filter(ops_f, "step")
    total = rows["dur_ns"].sum()
    time = rows.group_by("category").agg(
        pl.len().alias("ops"), pl.col("dur_ns").sum().alias("time_ns")
    )
    if source == "shapes":
        flops = rows.group_by("category").agg(*map(_sum_or_null, _FLOPS[::2]))
    elif source == "model" and model is not None:
        count = passes(rows) or 0
        flops = (
            model.with_columns(category=pl.col("kind").replace_strict(KIND_CATEGORY, default=None))
            .filter(pl.col("category").is_not_null())
            .group_by("category")
            .agg((pl.col(c).sum() * count).alias(c) for c in _FLOPS[::2])
        )
    else:
        flops = time.select("category", *(pl.lit(None, pl.Int64).alias(c) for c in _FLOPS[::2]))
    out = time.join(flops, on="category", how="full", coalesce=True, nulls_equal=True)
    both = pl.col("matmul_flop").fill_null(0) + pl.col("other_flop_estimate").fill_null(0)
    all_flop = out.select(both.sum()).item()
    # A category none of whose FLOPs could be counted has no FLOP share, not 0.
    counted = pl.col("matmul_flop").is_not_null() | pl.col("other_flop_estimate").is_not_null()
    out = out.with_columns(
        pl.col("ops", "time_ns").fill_null(0),
        time_share=pl.col("time_ns") / total if total else None,
        flop_share=pl.when(counted).then(both / all_flop) if all_flop and source else None,
    )
    ordered = out.sort(["time_ns", "category"], descending=[True, False], nulls_last=True)
    return ordered.select(REPORT_CATEGORY.names()).cast(REPORT_CATEGORY)


def step_wall(
    ops_f: pl.DataFrame, frame: pl.DataFrame, source: str | None
) -> dict[str, float | None]:
    """Steps' wall time and MFU over it, devices pooled.

    Wall time of a step on a device: first operation start to last operation
    end. Model FLOPs: the step operations' own (shapes), or every module row
    (model: per-step counts × steps already). None where undefined.
    """
    stepped = ops_f.filter(pl.col("step").is_not_null())
    per_step = stepped.group_by("device_id", "step").agg(
        (pl.col("end_ns").max() - pl.col("start_ns").min()).alias("wall_ns")
    )
    if per_step.is_empty() or source is None:
        return {"step_wall_ns": _total(per_step, "wall_ns"), "mfu_step_wall": None}
    rows = stepped if source == "shapes" else frame
    model_flop = pl.col("matmul_flop").fill_null(0) - pl.col("recompute_flop").fill_null(0)
    flops = rows.group_by("device_id").agg(model_flop.sum().alias("flop"))
    walls = per_step.group_by("device_id").agg(pl.col("wall_ns").sum())
    peaks = frame.select("device_id", "peak_tflops").unique("device_id")
    joined = walls.join(flops, on="device_id", how="left").join(peaks, on="device_id", how="left")
    capacity = joined.select((pl.col("wall_ns") * pl.col("peak_tflops") * 1e3).sum()).item()
    known = joined["peak_tflops"].is_not_null().all()
    mfu = joined["flop"].sum() / capacity if known and capacity else None
    return {"step_wall_ns": _total(walls, "wall_ns"), "mfu_step_wall": mfu}


def _total(frame: pl.DataFrame, column: str) -> float | None:
    return None if frame.is_empty() else float(frame[column].sum())
