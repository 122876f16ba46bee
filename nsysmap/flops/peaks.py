"""Dense peak TFLOP/s of common NVIDIA GPUs, for MFU.

Figures are NVIDIA's published peaks **without** structured sparsity (the
datasheets of the data-centre parts print the sparse figure, twice the dense
one, for TF32/FP16/BF16: those are halved here). `fp32` is the non-tensor-core
peak; `tf32`, `fp16` and `bf16` are tensor-core peaks with FP32 accumulation
(what PyTorch uses for matmuls), which GeForce parts run at half their FP16-
accumulate rate. None: the GPU has no such tensor-core path.

Sources (figures only):
* H100 SXM/PCIe/NVL: NVIDIA H100 Tensor Core GPU datasheet.
* H200 / H200 NVL: NVIDIA H200 Tensor Core GPU datasheet.
* B200 (HGX, 1,000 W) and GB200 (1,200 W): NVIDIA HGX B200 and GB200 NVL72
  datasheets, per GPU. B300: NVIDIA HGX B300 datasheet, whose per-system
  totals are divided by its 8 GPUs.
* A100 40GB/80GB SXM/PCIe: NVIDIA A100 Tensor Core GPU datasheet.
* A10: NVIDIA A10 Tensor Core GPU datasheet. A10G (the AWS variant) has no NVIDIA
  datasheet: its figures are those commonly quoted for it, lower tensor clocks.
* L4, L40S: NVIDIA L4 and L40S datasheets.
* V100 SXM2/PCIe, V100S: NVIDIA V100 Tensor Core GPU datasheet.
* T4: NVIDIA T4 Tensor Core GPU datasheet.
* RTX 3080/3090: NVIDIA Ampere GA102 GPU Architecture whitepaper (appendix tables).
  RTX 3060: derived from the same per-SM rates (28 SMs, 1.777 GHz boost).
* RTX 4090: NVIDIA Ada GPU Architecture whitepaper.
* RTX 2070 (Founders Edition clocks) and Quadro RTX 6000: NVIDIA Turing GPU Architecture
  whitepaper; RTX 2070 SUPER derived from the same per-SM rates (40 SMs, 1.77 GHz boost).
* GTX 1060 (6 GB, 1280 cores): GeForce GTX 1060 specifications (no tensor cores).

A device name matches the first pattern (case-insensitive regular
expression, searched in the name the report gives, e.g. TARGET_INFO_GPU's
"NVIDIA H100 80GB HBM3"). Laptop, Ti, Max-Q and other variants have other
clocks or chips, so the GeForce patterns are anchored at the end of the name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DTYPES = ("fp32", "tf32", "fp16", "bf16")
# Spellings accepted for a dtype: torch's names and short forms.
DTYPE_ALIASES = {
    "float32": "fp32",
    "float": "fp32",
    "fp32": "fp32",
    "tf32": "tf32",
    "float16": "fp16",
    "half": "fp16",
    "fp16": "fp16",
    "bfloat16": "bf16",
    "bf16": "bf16",
}


@dataclass(frozen=True)
class Peak:
    """Dense peak TFLOP/s of one GPU model per dtype (None: not available)."""

    gpu: str
    pattern: str
    fp32: float
    tf32: float | None
    fp16: float | None
    bf16: float | None

    def tflops(self, dtype: str) -> float | None:
        """The peak for a dtype of DTYPES."""
        return getattr(self, dtype)


PEAKS: tuple[Peak, ...] = (
    Peak("GB200", r"gb200", 80.0, 1250.0, 2500.0, 2500.0),
    Peak("B200", r"\bb200\b", 75.0, 1100.0, 2250.0, 2250.0),
    Peak("B300", r"\bb300\b", 75.0, 1125.0, 2250.0, 2250.0),
    Peak("H100 NVL", r"h100 nvl", 60.0, 417.5, 835.5, 835.5),
    Peak("H100 PCIe", r"h100.*pcie", 51.0, 378.0, 756.0, 756.0),
    Peak("H100 SXM", r"h100", 67.0, 494.7, 989.4, 989.4),
    Peak("H200 NVL", r"h200 nvl", 60.0, 417.5, 835.5, 835.5),
    Peak("H200", r"h200", 67.0, 494.7, 989.4, 989.4),
    Peak("A100", r"a100", 19.5, 156.0, 312.0, 312.0),
    Peak("A10G", r"\ba10g\b", 31.2, 35.0, 70.0, 70.0),
    Peak("A10", r"\ba10\b", 31.2, 62.5, 125.0, 125.0),
    Peak("L40S", r"\bl40s\b", 91.6, 183.0, 366.0, 366.0),
    Peak("L4", r"\bl4\b", 30.3, 60.0, 121.0, 121.0),
    Peak("V100S PCIe", r"v100s", 16.4, None, 130.0, None),
    Peak("V100 PCIe", r"v100[- ]pcie", 14.0, None, 112.0, None),
    Peak("V100 SXM2", r"v100", 15.7, None, 125.0, None),
    Peak("T4", r"\bt4\b", 8.1, None, 65.0, None),
    Peak("GeForce RTX 4090", r"rtx 4090$", 82.6, 82.6, 165.2, 165.2),
    Peak("GeForce RTX 3090", r"rtx 3090$", 35.6, 35.6, 71.0, 71.0),
    Peak("GeForce RTX 3080", r"rtx 3080$", 29.8, 29.8, 59.5, 59.5),
    Peak("GeForce RTX 3060", r"rtx 3060$", 12.7, 12.7, 25.5, 25.5),
    Peak("GeForce RTX 2070 SUPER", r"rtx 2070 super$", 9.1, None, 36.3, None),
    Peak("GeForce RTX 2070", r"rtx 2070$", 7.9, None, 31.5, None),
    Peak("Quadro RTX 6000", r"quadro rtx 6000$", 16.3, None, 130.5, None),
    Peak("GeForce GTX 1060", r"gtx 1060( 6gb)?$", 4.4, None, None, None),
)


def find_peak(device_name: str | None) -> Peak | None:
    """The table entry for a device name as a report gives it, or None."""
    if not device_name:
        return None
    name = " ".join(device_name.lower().split())
    return next((p for p in PEAKS if re.search(p.pattern, name)), None)


def normalise_dtype(dtype: str | None) -> str | None:
    """ "bfloat16" / "torch.bfloat16" / "bf16" -> "bf16"; None when not a dtype of DTYPES."""
    if not dtype:
        return None
    return DTYPE_ALIASES.get(dtype.lower().removeprefix("torch."))


def peak_tflops(device_name: str | None, dtype: str | None) -> tuple[float | None, str]:
    """(dense peak TFLOP/s, why) for a device and dtype; None with the reason when unknown."""
    peak = find_peak(device_name)
    if not device_name:  # None, or the empty name some traces write
        return None, "the report does not name the GPU"
    if peak is None:
        return None, f"{device_name!r} is not in nsysmap's table of peaks"
    if dtype is None:
        return None, "the compute dtype is unknown (give --dtype)"
    value = peak.tflops(dtype)
    if value is None:
        return None, f"{peak.gpu} has no {dtype} tensor-core peak"
    return value, f"{peak.gpu}, {dtype} dense peak {value:g} TFLOP/s"
