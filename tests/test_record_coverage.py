"""How much of each real training profile's GPU time its records give a phase.

Each profile is attributed as delivered and with its ranges removed in three
degrees (tests/record_coverage.py; the table in docs/inference.md, "Phases
from PyTorch's records"). Without phase ranges at least 95 % of the GPU time
must come out forward, backward or optimizer, and the steps must be the
ProfilerStep#N ones, found again from optimizer boundaries. GPU work launched
before the capture began (no launch call in the profile) belongs to no captured
step: it gets no step, only the phases of the captured step's work it repeats
(nsysmap.attribution.record_repeat).
"""

from __future__ import annotations

from functools import cache

import pytest

from tests.corpus import corpus_path
from tests.record_coverage import STRIPS, Coverage, measure

WITHOUT_PHASES = [strip for strip in STRIPS if STRIPS[strip] is not None]
# (profile, steps found with every range removed: the documented exceptions)
TRAINING = [
    ("hta_ddp_ns_resolution_rank0_v100.json.gz", 5),
    ("hta_recsys_shapes_rank0_a100.json.gz", 5),  # FusedAdam's multi_tensor_apply
    # Adagrad runs plain elementwise kernels: without its Optimizer.step# range
    # nothing marks the step's end
    ("param_dlrm_ddp_rank0of8_nccl_alltoall_v100.pt.trace.json", 0),
    ("param_dlrm_ddp_rank1of8_nccl_alltoall_v100.pt.trace.json", 0),
    ("aiperf_hf_gpt2_train_step_with_modules_stack_b200.json", 1),  # one training step
    ("cs336a2_small_fwdbwd_emitnvtx_shapes_a100.sqlite", 0),  # no optimizer: no step ends
]


@cache
def _measured(name: str, strip: str) -> Coverage:
    return measure(corpus_path(name), strip)


@pytest.mark.corpus
@pytest.mark.parametrize("strip", WITHOUT_PHASES)
@pytest.mark.parametrize(("name", "_steps"), TRAINING)
def test_records_give_forward_backward_or_optimizer_to_95_percent(name, _steps, strip):
    got = _measured(name, strip)
    assert got.coverage >= 0.95
    assert got.unlaunched_stepped == 0  # work launched before the capture: in no captured step


@pytest.mark.corpus
@pytest.mark.parametrize(("name", "steps"), TRAINING)
def test_steps_come_from_optimizer_boundaries_where_no_range_gives_them(name, steps):
    without_step_ranges = _measured(name, "phases+steps")
    if without_step_ranges.true_steps:  # Optimizer.step# ranges kept: one per ProfilerStep
        assert without_step_ranges.steps == without_step_ranges.true_steps
    assert without_step_ranges.step_source == ("records" if without_step_ranges.steps else None)
    bare = _measured(name, "all")
    assert bare.steps == steps
    assert bare.step_source == ("records" if steps else None)


@pytest.mark.corpus
@pytest.mark.parametrize(
    "name",
    [
        "param_dlrm_ddp_rank0of8_nccl_alltoall_v100.pt.trace.json",
        "param_dlrm_ddp_rank1of8_nccl_alltoall_v100.pt.trace.json",
    ],
)
def test_torchrec_data_distribution_is_the_data_phase(name):
    """As delivered, what the DLRM ranks' phase ranges leave out is TorchRec's batch copy
    and sparse-feature all-to-all (`## copy_batch_to_gpu ##`, `## sparse_data_dist ##`)."""
    got = _measured(name, "as delivered")
    assert got.coverage < 0.9  # forward, backward and optimizer alone
    assert got.labelled / (1 - got.unlaunched) >= 0.999


@pytest.mark.corpus
def test_a_forward_only_window_of_a_training_run_gets_no_phase():
    """fastvideo's 0.3 s window holds only the forward passes of 18 FSDP blocks: nothing
    in it is backward or optimizer work, so its records give no phase at all."""
    for strip in STRIPS:
        got = _measured("fastvideo_training_mfu_h100x2_before.sqlite", strip)
        assert (got.labelled, got.steps) == (0, 0)
