"""Rule fp32_gemm: fp32 GEMMs on the SIMT cores of a GPU that has tensor cores.

cuBLAS, CUTLASS and MAGMA name the GEMMs that run fp32 on the ordinary
(SIMT) cores `...sgemm...` (`ampere_sgemm_128x64_tn`, `cutlass_80_simt_sgemm_*`,
`magma_sgemmEx_kernel`); their tensor-core forms say `tensorop`, `s1688`,
`tf32`, `hgemm`, `bf16`... Convolutions (`implicit_convolve_sgemm`) follow
`torch.backends.cudnn.allow_tf32`, on by default, and are left out. On a
GPU of compute capability 8.0 or newer, TF32 (or bf16 autocast) moves these
GEMMs onto the tensor cores: at best they take fp32 peak / TF32 peak of
their time (nsysmap.flops.peaks). A GPU the profile does not name, or one
older than Ampere, gets no finding; a GPU the table of peaks lacks gets one
without an estimate, saying what it needs.
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from nsysmap.core.inert import markdown_code
from nsysmap.findings.finding import LOW, MEDIUM, Finding, Rule, claims_of
from nsysmap.findings.inputs import BUSY_KEYS, OWNER_TYPES, Inputs, total_ns
from nsysmap.findings.phrases import listed, ms, pct, plural, share
from nsysmap.flops.peaks import Peak, find_peak

# fp32 GEMMs on SIMT cores, by name; and what says a GEMM is none of those.
SIMT_FP32 = r"(?i)sgemm"
NOT_SIMT = r"(?i)tensorop|tf32|s1688|s16816|s161616|xmma|hgemm|bf16|f16|cudnn|conv|gcgemm|cgemm"
TF32_FIX = (
    'torch.backends.cuda.matmul.allow_tf32 = True (or torch.set_float32_matmul_precision("high")) '
    "before the model runs; or bf16 autocast: with torch.autocast('cuda', dtype=torch.bfloat16)"
)
BF16_FIX = (
    "bf16 autocast around the forward pass (and the loss, when training): "
    "with torch.autocast('cuda', dtype=torch.bfloat16) (TF32 runs no faster than fp32 on this GPU)"
)


def simt_gemms(x: Inputs) -> pl.DataFrame:
    """The measured fp32 SIMT GEMM kernels, per BUSY_KEYS: ops, time, and the kernel names
    with the time of each (`kernels`, `kernel_ns`: most time first)."""
    if not x.has("gemm"):
        return pl.DataFrame(schema={**OWNER_TYPES, "category": pl.String, "simt_ns": pl.Int64})
    gemms = x.measured().filter((pl.col("kind") == "kernel") & (pl.col("category") == "gemm"))
    name = pl.col("name").fill_null(pl.col("short_name"))
    names = gemms.select(name.unique()).collect().to_series()  # each distinct name once
    simt = names.filter(names.str.contains(SIMT_FP32) & ~names.str.contains(NOT_SIMT))
    kernel = pl.col("short_name").fill_null(pl.col("name")).alias("kernel")
    per_kernel = (
        gemms.filter(name.is_in(simt.implode()))
        .group_by(*BUSY_KEYS, kernel)
        .agg(ops=pl.len(), ns=pl.col("dur_ns").sum())
    )
    first = pl.struct(-pl.col("ns"), "kernel")  # most time first; equal times by name
    picked = per_kernel.group_by(BUSY_KEYS).agg(
        simt_ops=pl.col("ops").sum(),
        simt_ns=pl.col("ns").sum(),
        kernels=pl.col("kernel").sort_by(first),
        kernel_ns=pl.col("ns").sort_by(first),
    )
    return picked.collect()


def detect(x: Inputs, rule: Rule) -> list[Finding]:
    """One finding per device whose fp32 SIMT GEMMs could run on tensor cores."""
    found = simt_gemms(x)
    out = []
    for device in found["device_id"].unique().sort().to_list():
        if not _tensor_cores(x, rule, device):
            continue
        finding = _finding(x, rule, device, found.filter(pl.col("device_id") == device))
        if finding is not None:
            out.append(finding)
    return out


def _tensor_cores(x: Inputs, rule: Rule, device: int) -> bool:
    """Does the GPU run fp32 matmuls faster on tensor cores (TF32 or bf16)? By its compute
    capability; a profile that gives none, by the table of peaks for its name."""
    capability = x.compute_capability(device)
    if capability is not None:
        return capability >= rule.value("min_compute_capability")
    return _speedup(find_peak(x.device_name(device)))[0] is not None


def _finding(x: Inputs, rule: Rule, device: int, rows: pl.DataFrame) -> Finding | None:
    simt = total_ns(rows, "simt_ns")
    if rule.below_min_share(x, device, simt):
        return None
    name = x.device_name(device)
    peak = find_peak(name)
    ratio, fix, rate = _speedup(peak)
    if peak is not None and ratio is None:
        return None  # no faster path on this GPU
    base = Finding(
        rule=rule,
        device_id=device,
        place=x.where(device),
        evidence=_evidence(x, device, rows) + (f"; {rate}" if rate else ""),
        evidence_rows="ops.parquet: kind kernel, category gemm, name matching sgemm and no "
        f"tensor-core mark; device_id {device}",
        basis_ns=simt,
        claims=(),
        estimate="not estimated: the GPU's fp32 and tensor-core peaks are not known",
        confidence=LOW,
        rank=x.rank,
        fix=fix,
    )
    if ratio is None:
        needs = f"the fp32 and TF32/bf16 peaks of {markdown_code(name)}: not in nsysmap's table"
        return replace(base, needs=needs + " (nsysmap/flops/peaks.py)", known=False)
    wanted = x.with_busy(rows).with_columns(
        _want=(pl.col("simt_ns") * (1 - ratio)).floor().cast(pl.Int64)
    )
    return replace(
        base,
        claims=claims_of(wanted, "busy", BUSY_KEYS, "_want", "busy_ns", x.rank),
        estimate=f"the GEMM time × (1 − {ratio:.3f}), the ratio of the fp32 to the tensor-core "
        "peak: what compute-bound GEMMs save; memory-bound ones save less",
        confidence=MEDIUM,
    )


def _evidence(x: Inputs, device: int, rows: pl.DataFrame) -> str:
    steps, step_ns = x.step_count(device), x.step_ns(device)
    simt = total_ns(rows, "simt_ns")
    gemms = x.busy.filter((pl.col("device_id") == device) & (pl.col("category") == "gemm"))
    per_kernel = rows.select("kernels", "kernel_ns").explode("kernels", "kernel_ns")
    per_kernel = per_kernel.group_by("kernels").agg(pl.col("kernel_ns").sum())
    ordered = per_kernel.sort(["kernel_ns", "kernels"], descending=[True, False])
    kernels: list[str] = ordered["kernels"].to_list()  # most time first
    text = (
        f"{plural(total_ns(rows, 'simt_ops') / steps, 'fp32 GEMM kernel')}{x.per} on the SIMT "
        f"cores ({listed(kernels)}): {ms(simt / steps)}{x.per}, "
        f"{pct(share(simt, total_ns(gemms, 'busy_ns')))} of the GEMM time and "
        f"{pct(share(simt / steps, step_ns))} of {x.the_step}, on "
        f"{markdown_code(x.device_name(device))}"
    )
    capability = x.compute_capability(device)
    return text + (f" (compute capability {capability:.1f})" if capability is not None else "")


def _speedup(peak: Peak | None) -> tuple[float | None, str, str]:
    """(fp32 peak / tensor-core peak, the fix, the rates in words); None without either."""
    if peak is None:
        return None, TF32_FIX, ""
    if peak.tf32 and peak.tf32 > peak.fp32:
        return (
            peak.fp32 / peak.tf32,
            TF32_FIX,
            f"fp32 peak {peak.fp32:g} TFLOP/s, TF32 {peak.tf32:g}",
        )
    if peak.bf16 and peak.bf16 > peak.fp32:
        return (
            peak.fp32 / peak.bf16,
            BF16_FIX,
            f"fp32 peak {peak.fp32:g} TFLOP/s, bf16 {peak.bf16:g}",
        )
    return None, TF32_FIX, ""
