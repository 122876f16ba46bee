"""What to fix first on every real profile of the corpus: the findings docs/findings.md judges,
no rule where the profile already uses its fix, and the facts behind them recomputed apart.

`EXPECTED` is the table of docs/findings.md: per file, the rules that fire.
The facts a finding rests on are then recomputed without nsysmap: plain SQL
over the nsys exports (tests/corpus.py) and plain JSON over the traces.
"""

from __future__ import annotations

import gzip
import json
import re
from functools import cache
from itertools import pairwise
from typing import Any

import polars as pl
import pytest

from nsysmap.core.errors import NoGpuData
from nsysmap.findings import with_findings
from nsysmap.flow.analysis import Analysis
from nsysmap.flow.verbs import analyse, load_profile
from tests.corpus import CATALOGUE, FOLDERS, connect, corpus_path, needs_corpus

pytestmark = [pytest.mark.corpus, pytest.mark.slow, needs_corpus]

# file -> the rules whose findings it makes (docs/findings.md, the corpus table)
EXPECTED: dict[str, set[str]] = {
    "centerformer_baseline_pytorch_nvtx_only.sqlite": set(),  # no GPU work
    "centerformer_poolformer_trt_nvtx_only.sqlite": set(),
    "dlprof_pytorch_small_cnn_rtx2070.sqlite": {"host_sync"},
    "extrap_concurrent_streams_nvtx_windows.sqlite": set(),
    "fastvideo_training_mfu_h100x2_before.sqlite": {"exposed_communication", "elementwise_chain"},
    "gtls_cupy_23k_kernels_rtx3060.sqlite": set(),
    "mordred_gpu_hashjoin_quadro_2021.sqlite": {"host_sync", "sync_copy"},
    "nvfuser_gtest_hopper_matmul_h100.sqlite": set(),
    "pipit_cloverleaf_cuda_perlmutter.sqlite": {"host_sync", "sync_copy"},
    "pipit_saxpy_mpi_cuda_rank0_perlmutter.sqlite": {"host_sync", "sync_copy"},
    "qcu_mpi_python_wsl2_no_kernel_table.sqlite": set(),
    "torch_minimal_zeros_sum_rtx3080.sqlite": set(),
    "vecadd_streams_t4_gpu4.sqlite": set(),
    "cs336a2_fwd_no_nvtx_a100.sqlite": {"launch_bound", "fp32_gemm"},
    "cs336a2_small_fwd_emitnvtx_shapes_a100.sqlite": {"fp32_gemm", "unfused_attention"},
    "cs336a2_small_fwdbwd_emitnvtx_shapes_a100.sqlite": {
        "fp32_gemm",
        "launch_bound",
        "unfused_attention",
    },
    "hta_ddp_ns_resolution_rank0_v100.json.gz": set(),
    "hta_recsys_shapes_rank0_a100.json.gz": {"exposed_communication"},
    "tracelens_bert_small_infer_modules_h100.json.gz": {"launch_bound", "host_sync"},
    "tracelens_timesformer_infer_modules_h100.json.gz": {"unfused_attention", "sync_copy"},
    "tracelens_vit_nsfw_infer_modules_h100.json.gz": {"launch_bound"},
    "aiperf_hf_gpt2_train_step_with_modules_stack_b200.json": {
        "launch_bound",
        "host_sync",
        "elementwise_chain",
        "fp32_gemm",
        "unfused_attention",
    },
    "cs336a2_bench_iteration_fwd_bwd_nvtx_only_a10.sqlite": set(),
    "cs336a2_wsl2_cuda_trace_failed_no_cuda_tables_rtx4070ti.sqlite": set(),
    "hta_param_alexnet_warmup_measure_annotations_a100.json.gz": {"fp32_gemm"},
    "mmagic_vsr_pyprof_dict_nvtx_markers_a100.sqlite": {"host_sync"},
    "param_dlrm_ddp_rank0of8_nccl_alltoall_v100.pt.trace.json": {
        "host_sync",
        "launch_bound",
        "exposed_communication",
        "per_parameter_optimizer",
    },
    "param_dlrm_ddp_rank1of8_nccl_alltoall_v100.pt.trace.json": {
        "host_sync",
        "launch_bound",
        "exposed_communication",
        "per_parameter_optimizer",
    },
    # No elementwise_chain: of its chains' 18.2 ms of gaps, 18.1 are host work in the first
    # (cold) call of MultiQueryAttention (gaps of 2.6, 0.2 and 15.4 ms), which fusion keeps.
    "switchtransformer_moe_fwd_with_modules_a100.json": {
        "fp32_gemm",
        "unfused_attention",
        "host_sync",
    },
    "tracelens_moe_topk_expert_ffn_nvjet_sm103_b300.json.gz": {"launch_bound", "host_sync"},
    "tracelens_vllm_gptoss_fullgraph_decode_hipgraph_mi300x.json.gz": set(),
    "zoology_cuda_runtime_without_kernel_events_a100.json": set(),
    "cs336a2_small_fwd_unranged_warmup_then_measurement_range_rtx5070laptop.sqlite": {"fp32_gemm"},
    "cs336a2_wsl2_torch_smoke_test_runtime_only_no_kernels_rtx4080laptop.sqlite": set(),
}


@cache
def analysed(name: str) -> Analysis | None:
    """One corpus file attributed with its findings (None: a file without GPU work)."""
    try:
        return with_findings(analyse(load_profile(corpus_path(name))))
    except NoGpuData:
        return None


def findings(name: str) -> pl.DataFrame:
    """findings.parquet of one corpus file (empty for a file without GPU work)."""
    analysis = analysed(name)
    if analysis is None:
        return pl.DataFrame()
    assert analysis.findings is not None
    return analysis.findings


def of(name: str, rule: str) -> pl.DataFrame:
    return findings(name).filter(pl.col("rule") == rule)


def test_the_table_names_every_file_of_the_corpus():
    if not CATALOGUE.is_file():
        pytest.skip("the corpus is absent")
    on_disk = {
        p.name
        for folder in FOLDERS
        for p in folder.glob("*")
        if p.suffix in (".sqlite", ".json", ".gz") and p.name != "catalogue.json"
    }
    assert on_disk == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_rules_that_fire_are_those_judged_right(name):
    table = findings(name)
    rules = set(table["rule"]) if table.height else set()
    assert rules == EXPECTED[name]
    if table.height:
        known = table.filter(pl.col("saving_ns_per_step").is_not_null())
        assert (known["saving_ns_per_step"] <= known["basis_ns_per_step"]).all()
        assert (known["saving_share"] <= 1).all()
        assert table["priority"].to_list() == list(range(1, table.height + 1))


# ---------------------------------------------------------------- facts recomputed apart


def _sql(name: str, query: str) -> list[tuple[Any, ...]]:
    with connect(corpus_path(name)) as conn:
        return conn.execute(query).fetchall()


def _trace(name: str) -> dict[str, Any]:
    path = corpus_path(name)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def _kernels(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]


CS336 = "cs336a2_small_fwd_emitnvtx_shapes_a100.sqlite"


def test_fp32_gemms_of_an_a100_forward_are_its_sgemm_kernels():
    ((sgemm, gemm),) = _sql(
        CS336,
        "SELECT SUM(CASE WHEN s.value LIKE '%sgemm%' THEN k.\"end\" - k.start END), "
        "SUM(CASE WHEN s.value LIKE '%gemm%' THEN k.\"end\" - k.start END) "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName",
    )
    ((major,),) = _sql(CS336, "SELECT computeMajor FROM TARGET_INFO_GPU")
    row = of(CS336, "fp32_gemm").row(0, named=True)
    assert int(major) == 8 and sgemm == gemm  # Ampere, and every GEMM a SIMT sgemm
    assert row["basis_ns_per_step"] == sgemm  # one forward pass: one step
    assert row["saving_ns_per_step"] == pytest.approx(sgemm * (1 - 19.5 / 156), abs=2)


def test_unfused_attention_of_the_course_model_has_softmax_and_no_fused_kernel():
    """The course's attention computes its softmax by hand (an exp kernel among others)."""
    names = [
        r[0].decode()
        for r in _sql(
            CS336,
            "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName",
        )
    ]
    assert any("exp_kernel" in n for n in names)
    assert not any(w in n.lower() for n in names for w in ("flash", "fmha", "attention"))
    assert of(CS336, "unfused_attention")["range_path"].to_list() == [
        "profile > forward pass > scaled dot product attention"
    ]


FWD_BWD = "cs336a2_small_fwdbwd_emitnvtx_shapes_a100.sqlite"


def test_the_step_a_range_around_a_forward_and_backward_pass_makes_is_the_findings_step():
    """No step range, but `profile` holds one forward and one backward pass: the structure's
    one step is the findings' step (per step, as the report's step scope), its time the
    GPU span of the work launched inside `profile`, the fp32 GEMMs' time that of the
    sgemm kernels launched there."""
    ((start, end),) = _sql(
        FWD_BWD,
        'SELECT n.start, n."end" FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId '
        "WHERE COALESCE(n.text, s.value) = 'profile'",
    )
    launched = (
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
        f"ON r.correlationId = k.correlationId WHERE r.start BETWEEN {start} AND {end}"
    )
    ((sgemm,),) = _sql(
        FWD_BWD,
        f'SELECT SUM(k."end" - k.start) {launched} '
        "AND k.demangledName IN (SELECT id FROM StringIds WHERE value LIKE '%sgemm%')",
    )
    table = findings(FWD_BWD)
    assert set(table["rule"]) == EXPECTED[FWD_BWD]
    assert table["per_step"].all() and (table["steps"] == 1).all()
    analysis = analysed(FWD_BWD)
    assert analysis is not None and analysis.structure is not None
    step = analysis.structure.filter(kind="step", region="measured")
    assert step.height == 1 and step["name"][0] == "profile"
    assert (table["step_ns"] == step["gpu_end_ns"][0] - step["gpu_start_ns"][0]).all()
    assert of(FWD_BWD, "fp32_gemm")["basis_ns_per_step"][0] == sgemm
    assert "of the step" in of(FWD_BWD, "fp32_gemm")["evidence"][0]


NO_NVTX = "cs336a2_fwd_no_nvtx_a100.sqlite"
SYNC_CALLS = "s.value LIKE '%Synchronize%'"


def _measured(name: str) -> tuple[int, int]:
    """The measured region structure.parquet found (host clock): set-up and warm-up before."""
    analysis = analysed(name)
    assert analysis is not None and analysis.structure is not None
    region = analysis.structure.filter(
        (pl.col("kind") == "region") & (pl.col("region") == "measured")
    )
    return region["start_ns"][0], region["end_ns"][0]


def test_launch_gaps_of_the_measured_passes_equal_a_sum_over_the_export():
    """Without ranges the step is the measured region (three forward passes after a warm-up
    one); its launch gaps: a stream's next operation launched after the last one ended,
    at most 0.25 ms later, no synchronisation between."""
    lo, hi = _measured(NO_NVTX)
    ops = _sql(
        NO_NVTX,
        'SELECT g.start, g."end", r.start FROM (SELECT start, "end", correlationId, streamId '
        'FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT start, "end", correlationId, streamId '
        'FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL SELECT start, "end", correlationId, '
        "streamId FROM CUPTI_ACTIVITY_KIND_MEMSET) g JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
        "ON r.correlationId = g.correlationId ORDER BY g.streamId, g.start",
    )
    syncs = _sql(
        NO_NVTX,
        'SELECT r.start, r."end" FROM CUPTI_ACTIVITY_KIND_RUNTIME r '
        f"JOIN StringIds s ON s.id = r.nameId WHERE {SYNC_CALLS}",
    )
    streams = {
        r[0] for r in _sql(NO_NVTX, "SELECT DISTINCT streamId FROM CUPTI_ACTIVITY_KIND_KERNEL")
    }
    late = [
        now[0] - before[1]
        for before, now in pairwise(ops)
        if lo <= before[2]
        and now[2] <= hi
        and 0 < now[0] - before[1] <= 250_000
        and now[2] > before[1]
        and not any(s < now[2] and e > before[1] for s, e in syncs)
    ]
    row = of(NO_NVTX, "launch_bound").row(0, named=True)
    assert len(streams) == 1 and row["steps"] == 1
    assert row["basis_ns_per_step"] == sum(late)
    launches = sum(lo <= op[2] <= hi for op in ops)  # those of the measured region only
    # No step ranges: the measured region counts as one, its figures are totals over it.
    assert re.search(rf"(?<![\d,]){launches:,} launches\b", row["evidence"])
    assert not row["per_step"] and "per step" not in row["evidence"]


def test_no_host_sync_where_every_synchronisation_is_before_the_measured_passes():
    lo, hi = _measured(NO_NVTX)
    ((inside, calls),) = _sql(
        NO_NVTX,
        f"SELECT SUM(r.start BETWEEN {lo} AND {hi}), COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        f"JOIN StringIds s ON s.id = r.nameId WHERE {SYNC_CALLS}",
    )
    assert calls > 100 and inside == 0  # the set-up's copies and the warm-up's timing
    assert of(NO_NVTX, "host_sync").is_empty()


MORDRED = "mordred_gpu_hashjoin_quadro_2021.sqlite"


def test_synchronous_copies_are_the_cudamemcpy_host_to_device_copies():
    ((time, n),) = _sql(
        MORDRED,
        'SELECT SUM(m."end" - m.start), COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m '
        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = m.correlationId "
        "JOIN StringIds s ON s.id = r.nameId WHERE m.copyKind = 1 AND s.value LIKE 'cudaMemcpy%' "
        "AND s.value NOT LIKE '%Async%'",
    )
    row = of(MORDRED, "sync_copy").row(0, named=True)
    assert row["basis_ns_per_step"] == time and f"{n} synchronous" in row["evidence"]


CLOVERLEAF = "pipit_cloverleaf_cuda_perlmutter.sqlite"


def test_cloverleaf_synchronises_after_its_kernels():
    ((syncs,),) = _sql(
        CLOVERLEAF,
        "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "WHERE s.value LIKE 'cudaDeviceSynchronize%'",
    )
    ((kernels,),) = _sql(CLOVERLEAF, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    assert syncs >= kernels
    assert of(CLOVERLEAF, "host_sync")["saving_ns_per_step"][0] > 0


DLRM = "param_dlrm_ddp_rank0of8_nccl_alltoall_v100.pt.trace.json"


def test_the_dlrm_optimizer_runs_one_kernel_per_operation_and_parameter():
    trace = _trace(DLRM)
    step = next(e for e in trace["traceEvents"] if e.get("name") == "Optimizer.step#Adagrad.step")
    calls = {
        e["args"]["correlation"]
        for e in trace["traceEvents"]
        if e.get("cat") == "cuda_runtime"
        and e["tid"] == step["tid"]
        and step["ts"] <= e["ts"] < step["ts"] + step["dur"]
    }
    kernels = [k for k in _kernels(trace) if k["args"].get("correlation") in calls]
    assert len(kernels) == 64 and not any("multi_tensor" in k["name"] for k in kernels)
    assert "64 small kernels per step" in of(DLRM, "per_parameter_optimizer")["evidence"][0]


def test_exposed_communication_agrees_with_a_sum_over_the_trace():
    """The exposed time the rule counts is the trace's; the findings' savings take it once:
    what the host_sync and launch_bound findings ranked above took of it (their gaps on
    the compute stream lie under it) is not the communication's saving too."""
    kernels = _kernels(_trace(DLRM))
    comm = [k for k in kernels if "nccl" in k["name"].lower()]
    exposed = sum(k["dur"] - _hidden(k, kernels) for k in comm) * 1000
    analysis = analysed(DLRM)
    assert analysis is not None
    counted = analysis.summaries.overlap.filter(pl.col("step").is_not_null())
    assert counted["exposed_ns"].sum() == pytest.approx(exposed, abs=1000)
    found = of(DLRM, "exposed_communication")["saving_ns_per_step"].sum()
    assert 0 < found < exposed


def _hidden(k: dict[str, Any], kernels: list[dict[str, Any]]) -> float:
    """How long other kernels (no communication) ran on other streams during `k` (µs)."""
    spans = sorted(
        (max(o["ts"], k["ts"]), min(o["ts"] + o["dur"], k["ts"] + k["dur"]))
        for o in kernels
        if o["args"]["stream"] != k["args"]["stream"] and "nccl" not in o["name"].lower()
    )
    covered, end = 0.0, k["ts"]
    for start, stop in spans:
        start = max(start, end)
        if stop > start:
            covered, end = covered + stop - start, stop
    return covered


SWITCH = "switchtransformer_moe_fwd_with_modules_a100.json"


def test_fp32_gemms_of_the_switch_transformer_are_its_sgemm_kernels():
    trace = _trace(SWITCH)
    sgemm = sum(k["dur"] for k in _kernels(trace) if "sgemm" in k["name"]) * 1000
    assert "A100" in trace["deviceProperties"][0]["name"]
    assert of(SWITCH, "fp32_gemm")["basis_ns_per_step"][0] == pytest.approx(sgemm, abs=1000)


# ---------------------------------------------------------------- the fix already in use


@pytest.mark.parametrize(
    ("name", "rule", "sign"),
    [
        ("fastvideo_training_mfu_h100x2_before.sqlite", "fp32_gemm", "bfloat16"),
        ("tracelens_timesformer_infer_modules_h100.json.gz", "fp32_gemm", "bf16"),
        ("hta_ddp_ns_resolution_rank0_v100.json.gz", "per_parameter_optimizer", "multi_tensor"),
        ("hta_recsys_shapes_rank0_a100.json.gz", "per_parameter_optimizer", "multi_tensor"),
        (
            "aiperf_hf_gpt2_train_step_with_modules_stack_b200.json",
            "per_parameter_optimizer",
            "multi_tensor",
        ),
        ("tracelens_bert_small_infer_modules_h100.json.gz", "unfused_attention", "flash"),
        ("tracelens_vit_nsfw_infer_modules_h100.json.gz", "unfused_attention", "flash"),
    ],
)
def test_no_rule_fires_where_the_profile_uses_its_fix(name, rule, sign):
    path = corpus_path(name)
    if path.suffix == ".sqlite":
        names = [r[0].decode() for r in _sql(name, "SELECT value FROM StringIds")]
    else:
        names = [k["name"] for k in _kernels(_trace(name))]
    assert any(sign in n.lower() for n in names), f"{name} does not show {sign}"
    assert not any("sgemm" in n for n in names) or rule != "fp32_gemm"
    assert of(name, rule).is_empty()
