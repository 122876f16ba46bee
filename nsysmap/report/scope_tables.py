"""Time, FLOPs and kernels by scope: the pure tables behind `nsysmap report`.

Scopes select operations of ops.parquet from the structure the profile carries:

    step              every operation inside a step but not warm-up work; without
                      step ranges, every operation in a phase (work outside every
                      phase, such as initialisation copies, is left out and said);
                      without phases either, the whole capture
    forward           phase "forward" (inside a step, where there are steps); in a
                      profile without any phase, the operations of forward module
                      calls (direction "forward"), when module calls cover at
                      least half of the time
    forward_backward  phases "forward", "loss" and "backward" (inside a step, where
                      there are steps; without phases: forward and backward
                      module calls)

A *pass* of a scope is one (device, step) pair with operations in it, so
"calls per forward pass" is the calls in phase forward divided by the number
of distinct (device, step) pairs with forward operations: per step and per
GPU. Without steps, forward passes are counted from the forward ranges
themselves (nsysmap.report.passes). Matrix multiplication is the `gemm`
category plus fused `attention` kernels. Devices are pooled: time and FLOPs
add up over GPUs.
"""

from __future__ import annotations

import polars as pl

from nsysmap.report import scopes as structured

SCOPES = ("forward", "forward_backward", "step")
SCOPE_LABELS = {
    "forward": "forward pass",
    "forward_backward": "forward + loss + backward",
    "step": "full step",
}
MATMUL_CATEGORIES = ("gemm", "attention")
# What the report counts as matrix multiplication, as its readers see it said.
MATMUL_DEFINITION = (
    "gemm kernels (convolutions run as implicit or explicit GEMMs among them: cuDNN's"
    " implicit_convolve_sgemm and scudnn kernels, xmma and CUTLASS implicit-GEMM fprop, dgrad"
    " and wgrad kernels) plus fused attention kernels; a convolution's other kernels"
    " (cuDNN's direct dgrad_engine and wgrad_alg0_engine, FFT and Winograd transforms,"
    " im2col) are category convolution and not counted"
)
WARMUP = "warmup"  # ops.parquet's mark of warm-up work, left out of every scope
ATTENTION_CLASS = r"(?i)attention|attn"
TOP_N = 5
NON_MATMUL_MIN_SHARE = 0.01
# Without phase ranges, module calls stand for the forward and backward scopes only
# when they cover at least this share of the time (else a few recorded modules would).
MODULE_SCOPE_MIN_SHARE = 0.5

# The columns naming a kernel (or copy, set) and its calls and time, in both tables below.
_KERNEL_TIME = {
    "kind": pl.String,
    "name": pl.String,
    "short_name": pl.String,
    "category": pl.String,
    "calls": pl.Int64,
    "time_ns": pl.Int64,
}
TOP_KERNELS = pl.Schema(
    {
        "run": pl.String,  # "main" or "compare"
        "scope": pl.String,
        "rank": pl.Int64,
        **_KERNEL_TIME,
        "time_share": pl.Float64,  # of the scope's time
        "passes": pl.Int64,  # (device, step) pairs in the scope; null without steps
        "calls_per_pass": pl.Float64,
        "forward_calls_per_pass": pl.Float64,  # calls in phase forward / forward passes
    }
)
NON_MATMUL = pl.Schema(
    {
        **_KERNEL_TIME,
        "time_share": pl.Float64,  # of the full step's time
    }
)


def has_steps(ops: pl.DataFrame) -> bool:
    """True when some operation lies in a known step."""
    return bool(ops["step"].is_not_null().any())


def has_phases(ops: pl.DataFrame) -> bool:
    """True when some operation has a phase."""
    return bool(ops["phase"].is_not_null().any())


def is_warmup() -> pl.Expr:
    """Warm-up work: left out of every scope."""
    return pl.col(WARMUP).fill_null(False)


def modules_cover(ops: pl.DataFrame) -> bool:
    """True when module calls (a direction) cover at least MODULE_SCOPE_MIN_SHARE of the
    time: enough for forward and backward scopes without phase ranges."""
    total = int(ops["dur_ns"].sum())
    called = int(ops.filter(pl.col("direction").is_not_null())["dur_ns"].sum())
    return bool(total) and called >= MODULE_SCOPE_MIN_SHARE * total


def has_backward(ops: pl.DataFrame) -> bool:
    """True when the profile has backward work: a backward pass of its structure (where
    `ops` carry it), a backward phase, or without phases, backward module calls."""
    if _placed(ops):
        return structured.backward_region(ops) is not None
    if has_phases(ops):
        return bool((ops["phase"] == "backward").any())
    return (
        not scope_filter(ops, "forward_backward")
        .filter(pl.col("direction").cast(pl.String) == "backward")
        .is_empty()
    )


def step_basis(ops: pl.DataFrame) -> str:
    """What the step scope is made of: "steps", "phases" or "capture"."""
    if has_steps(ops):
        return "steps"
    return "phases" if has_phases(ops) else "capture"


def _placed(ops: pl.DataFrame) -> bool:
    """Do `ops` carry their place in the structure (nsysmap.structure.table.assign)?"""
    return "s_region" in ops.columns


def scope_filter(ops: pl.DataFrame, scope: str) -> pl.DataFrame:
    """The operations of one scope: instances of the structure where `ops` carry their
    place in it (nsysmap.report.scopes), else by their labels (see the module docstring)."""
    if _placed(ops):
        return structured.rows(ops, scope)
    if scope == "step":
        basis = step_basis(ops)
        if basis == "capture":
            return ops.filter(~is_warmup())
        inside = pl.col("step" if basis == "steps" else "phase").is_not_null()
        return ops.filter(inside & ~is_warmup())
    if not has_phases(ops):
        if not modules_cover(ops):
            return ops.clear()
        wanted = ["forward"] if scope == "forward" else ["forward", "backward"]
        return ops.filter(pl.col("direction").cast(pl.String).is_in(wanted) & ~is_warmup())
    phases = ["forward"] if scope == "forward" else ["forward", "loss", "backward"]
    # inside the steps where there are steps: the step scope holds its parts (work
    # the GPU ran from before the capture has a phase, but no step)
    in_steps = pl.col("step").is_not_null() if has_steps(ops) else pl.lit(True)
    return ops.filter(pl.col("phase").is_in(phases) & in_steps & ~is_warmup())


def label_source(ops: pl.DataFrame, column: str) -> str:
    """Where the profile's steps or phases (`column`: "step" or "phase") come from:
    "ranges", "PyTorch's records" or both (ops.parquet's `step_source` / `phase_source`)."""
    source = f"{column}_source"
    if source not in ops.columns:
        return f"{column} ranges"
    given = set(ops.filter(pl.col(column).is_not_null())[source].drop_nulls().unique())
    if given == {"records"}:
        return f"PyTorch's records (no range names the {column}s)"
    if "records" in given:
        return f"{column} ranges and PyTorch's records"
    return f"{column} ranges"


def scope_source(ops: pl.DataFrame, scope: str) -> str:
    """Where a scope's operations come from, in words."""
    if scope == "step":
        basis = step_basis(ops)
        if basis == "steps":
            return f"steps from {label_source(ops, 'step')}, warm-up work left out"
        if basis == "phases":
            return (
                f"every phase, from {label_source(ops, 'phase')} (no steps), work outside "
                "every phase left out"
            )
        return "the whole capture (neither steps nor phases)"
    if has_phases(ops):
        return label_source(ops, "phase")
    return "module calls of that direction (no phases)"


def passes(ops: pl.DataFrame) -> int | None:
    """Distinct (device, step) pairs among `ops`; None when no operation has a step
    (steps of the structure, where `ops` carry their place in it)."""
    if _placed(ops):
        return structured.step_count(ops)
    stepped = ops.filter(pl.col("step").is_not_null())
    if stepped.is_empty():
        return None
    return stepped.select("device_id", "step").unique().height


def is_kernel() -> pl.Expr:
    """Operations that are kernels (or, on the CPU backend, operators): not copies,
    memsets nor CUDA graph replays traced whole."""
    return pl.col("kind").cast(pl.String).is_in(["kernel", "cpu_op"])


def is_matmul() -> pl.Expr:
    """Operations that are matrix multiplications: gemm and fused attention kernels."""
    return pl.col("category").is_in(MATMUL_CATEGORIES)


def in_attention_module() -> pl.Expr:
    """Operations attributed to an attention module (class name says so)."""
    return pl.col("module_class").str.contains(ATTENTION_CLASS).fill_null(False)


def share(part: int | float | None, whole: int | float | None) -> float | None:
    """part / whole, None when undefined."""
    if part is None or not whole:
        return None
    return float(part) / float(whole)


def matmul_shares(ops: pl.DataFrame) -> dict[str, tuple[int, int]]:
    """scope -> (matmul time_ns, total time_ns)."""
    out = {}
    for scope in SCOPES:
        rows = scope_filter(ops, scope)
        matmul = rows.filter(is_matmul())["dur_ns"].sum()
        out[scope] = (int(matmul), int(rows["dur_ns"].sum()))
    return out


def top_kernels(
    ops: pl.DataFrame, run: str = "main", n: int = TOP_N, forward_passes: int | None = None
) -> pl.DataFrame:
    """The `n` kernels (by name) with the most cumulative time in each scope the profile
    has (forward + backward only with backward work); copies, memsets and graph replays
    are no kernels. `forward_passes`: the forward scope's passes, where `ops` do not
    carry their place in the structure."""
    forward = scope_filter(ops, "forward")
    if _placed(ops):
        forward_passes = structured.pass_count(forward)
    else:
        forward_passes = passes(forward) or forward_passes
    per_forward = forward.group_by("name").agg(
        (pl.len() / forward_passes if forward_passes else pl.lit(None, pl.Float64)).alias(
            "forward_calls_per_pass"
        )
    )
    frames = []
    for scope in SCOPES:
        if scope == "forward_backward" and not has_backward(ops):
            continue
        rows = scope_filter(ops, scope)
        count = forward_passes if scope == "forward" else passes(rows)
        total = rows["dur_ns"].sum()
        top = (
            rows.filter(is_kernel())
            .group_by("kind", "name", "short_name", "category")
            .agg(pl.len().alias("calls"), pl.col("dur_ns").sum().alias("time_ns"))
            .sort(["time_ns", "name"], descending=[True, False])
            .head(n)
            .with_row_index("rank", offset=1)
            .with_columns(
                run=pl.lit(run),
                scope=pl.lit(scope),
                time_share=pl.col("time_ns") / total if total else pl.lit(None, pl.Float64),
                passes=pl.lit(count, pl.Int64),
                calls_per_pass=pl.col("calls") / count if count else pl.lit(None, pl.Float64),
            )
        )
        top = top.join(per_forward, on="name", how="left", nulls_equal=True).sort("rank")
        if forward_passes:
            top = top.with_columns(pl.col("forward_calls_per_pass").fill_null(0.0))
        frames.append(top.with_columns(pl.col("kind").cast(pl.String)).select(TOP_KERNELS.names()))
    return pl.concat(frames).cast(TOP_KERNELS)


def non_matmul_kernels(ops: pl.DataFrame, min_share: float = NON_MATMUL_MIN_SHARE) -> pl.DataFrame:
    """Non-matmul kernels (by name) with at least `min_share` of the full step's time."""
    rows = scope_filter(ops, "step")
    total = rows["dur_ns"].sum()
    if not total:
        return pl.DataFrame(schema=NON_MATMUL)
    grouped = (
        rows.filter(~is_matmul() & is_kernel())
        .group_by("kind", "name", "short_name", "category")
        .agg(pl.len().alias("calls"), pl.col("dur_ns").sum().alias("time_ns"))
        .with_columns(time_share=pl.col("time_ns") / total, kind=pl.col("kind").cast(pl.String))
        .filter(pl.col("time_share") >= min_share)
        .sort(["time_ns", "name"], descending=[True, False])
    )
    return grouped.select(NON_MATMUL.names()).cast(NON_MATMUL)


def softmax_times(ops: pl.DataFrame) -> dict[str, int]:
    """Full-step time of softmax and matmul work, overall and inside attention modules."""
    rows = scope_filter(ops, "step")
    softmax = pl.col("category") == "softmax"
    fused = pl.col("category") == "attention"
    sums = rows.select(
        softmax=pl.col("dur_ns").filter(softmax).sum(),
        matmul=pl.col("dur_ns").filter(is_matmul()).sum(),
        attention_softmax=pl.col("dur_ns").filter(softmax & in_attention_module()).sum(),
        attention_matmul=pl.col("dur_ns")
        .filter(fused | (is_matmul() & in_attention_module()))
        .sum(),
        fused_attention=pl.col("dur_ns").filter(fused).sum(),
    )
    return {k: int(v or 0) for k, v in sums.row(0, named=True).items()}


def softmax_time(times: dict[str, int], key: str) -> int | None:
    """A softmax time of `softmax_times`, None when fused attention hides all softmax work."""
    return None if times["fused_attention"] and not times[key] else times[key]


def scope_label(ops: pl.DataFrame, scope: str) -> str:
    """How a scope is named, for operations that do not carry their place in the
    structure (nsysmap.report.scopes.describe names those): the step scope says what it
    is made of."""
    if scope != "step":
        return SCOPE_LABELS[scope]
    return {"steps": "full step", "phases": "step (all phases)", "capture": "whole capture"}[
        step_basis(ops)
    ]


def layer_path() -> pl.Expr:
    """Module path with numbered children as `*`: transformer.h.3.attn -> transformer.h.*.attn,
    GPT2Block_3.GPT2Attention_3 -> GPT2Block_*.GPT2Attention_* (the rule:
    nsysmap.attribution.module_names)."""
    from nsysmap.attribution.module_names import layer_path as collapsed

    return collapsed("module")
