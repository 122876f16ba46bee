"""The table of dense peaks: device names as reports give them, dtypes, unknown devices."""

from __future__ import annotations

import pytest

from nsysmap.flops.peaks import PEAKS, find_peak, normalise_dtype, peak_tflops


@pytest.mark.parametrize(
    ("name", "gpu"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),  # TARGET_INFO_GPU of a real H100 export
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA B200", "B200"),  # deviceProperties of a real B200 torch.profiler trace
        ("NVIDIA GB200", "GB200"),
        ("NVIDIA B300 SXM6 AC", "B300"),  # deviceProperties of a real B300 trace
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("NVIDIA A100-PCIE-40GB", "A100"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
        ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
        ("Tesla T4", "T4"),
        ("NVIDIA GeForce RTX 3060", "GeForce RTX 3060"),
        ("NVIDIA GeForce RTX 3080", "GeForce RTX 3080"),
        ("NVIDIA GeForce RTX 3090", "GeForce RTX 3090"),
        ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
        ("NVIDIA GeForce RTX 2070 SUPER", "GeForce RTX 2070 SUPER"),
        ("GeForce RTX 2070", "GeForce RTX 2070"),
        ("Quadro RTX 6000", "Quadro RTX 6000"),
        ("GeForce GTX 1060", "GeForce GTX 1060"),
    ],
)
def test_device_names_find_their_gpu(name, gpu):
    assert find_peak(name).gpu == gpu


@pytest.mark.parametrize(
    "name",
    [
        "GeForce GTX 1060 with Max-Q Design",  # other clocks
        "NVIDIA GeForce RTX 4060 Laptop GPU",
        "NVIDIA GeForce RTX 3080 Ti",
        "NVIDIA TITAN RTX",
        "Intel(R) HD Graphics 630",
        "",
        None,
    ],
)
def test_other_devices_are_unknown(name):
    assert find_peak(name) is None


def test_dense_peaks_are_half_the_sparse_datasheet_figures_where_printed():
    # The datasheets print TF32/FP16/BF16 with sparsity: H100 SXM 989 / 1979, A100 312 / 624.
    h100, a100 = find_peak("H100 SXM5"), find_peak("A100")
    assert (h100.tf32 * 2, h100.bf16 * 2) == pytest.approx((989.4, 1978.8))
    assert (a100.tf32 * 2, a100.bf16 * 2) == (312.0, 624.0)
    b200 = find_peak("NVIDIA B200")  # HGX B200: TF32 2.2, FP16/BF16 4.5 PFLOP/s sparse
    assert (b200.tf32 * 2, b200.bf16 * 2) == (2200.0, 4500.0)
    for peak in PEAKS:  # tensor-core peaks are never below the plain FP32 peak
        assert all(v is None or v >= peak.fp32 for v in (peak.tf32, peak.fp16, peak.bf16))


def test_peak_for_dtype_or_the_reason_there_is_none():
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == (
        989.4,
        "H100 SXM, bf16 dense peak 989.4 TFLOP/s",
    )
    assert peak_tflops("Tesla T4", "bf16") == (None, "T4 has no bf16 tensor-core peak")
    assert peak_tflops("Tesla T4", None)[0] is None
    assert "not in nsysmap's table" in peak_tflops("NVIDIA TITAN RTX", "fp32")[1]
    assert peak_tflops(None, "fp32") == (None, "the report does not name the GPU")


def test_dtype_spellings():
    assert [normalise_dtype(d) for d in ("torch.bfloat16", "float16", "float32", "tf32")] == [
        "bf16",
        "fp16",
        "fp32",
        "tf32",
    ]
    assert normalise_dtype("int64") is None and normalise_dtype(None) is None
