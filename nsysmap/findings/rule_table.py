"""The rules of "what to fix first", as data: one place, each with its named thresholds.

Each rule says what it finds, the fix it proposes (the option, call or code
to try), the section of docs/findings.md that explains it and its
thresholds; its detector (in the module named beside it) reads the tables
(nsysmap.findings.inputs) and returns its findings. `min_share` is the least
estimated saving, as a share of the step, worth a finding.
"""

from __future__ import annotations

from nsysmap.findings import (
    attention,
    chains,
    comm,
    data,
    gemm,
    launches,
    optimizer,
    stragglers,
    syncs,
)
from nsysmap.findings.finding import CAUSE, GENERAL, Rule
from nsysmap.findings.threshold import Threshold

MIN_SHARE = "min_share"


def _least(share: float) -> Threshold:
    return Threshold(MIN_SHARE, share, "the least saving worth a finding, as a share of the step")


RULES: tuple[Rule, ...] = (
    Rule(
        "fp32_gemm",
        "fp32 GEMMs on the SIMT cores of a GPU with tensor cores",
        gemm.TF32_FIX,
        "fp32_gemm",
        (
            Threshold(
                "min_compute_capability", 8.0, "the GPU runs TF32 and bf16 on tensor cores (Ampere)"
            ),
            _least(0.01),
        ),
        gemm.detect,
    ),
    Rule(
        "launch_bound",
        "A launch-bound phase: the GPU waits for the host to launch each kernel",
        'capture the phase as a CUDA graph: torch.compile(model, mode="reduce-overhead"), or '
        "torch.cuda.make_graphed_callables / torch.cuda.CUDAGraph; or give each kernel more work "
        "(a larger batch)",
        "launch_bound",
        (
            Threshold(
                "min_launch_bound_share",
                0.2,
                "the least share of the phase's wall time (its work and the gaps before it) "
                "spent waiting for launches",
            ),
            _least(0.02),
        ),
        launches.launch_bound,
        tier=GENERAL,
    ),
    Rule(
        "per_parameter_optimizer",
        "A per-parameter optimizer: several small kernels for every parameter",
        "torch.optim.AdamW(params, fused=True) (or foreach=True; the same for Adam, SGD, "
        "Adagrad, ...); a hand-written update loop: torch._foreach_* operations over the lists "
        "of parameters, gradients and states",
        "per_parameter_optimizer",
        (
            Threshold(
                "min_kernels_per_step",
                32,
                "the least number of small kernels (elementwise, reduction, other) the "
                "optimizer phase launches per step",
            ),
            _least(0.005),
        ),
        optimizer.per_parameter_optimizer,
    ),
    Rule(
        "unfused_attention",
        "Attention as separate score, softmax and matmul kernels",
        "torch.nn.functional.scaled_dot_product_attention(q, k, v) in place of the scores, "
        "mask, softmax and weighted sum, with the model's own mask: is_causal=True for a causal "
        "(decoder) mask, attn_mask= for another, neither where nothing is masked (an encoder); "
        'Hugging Face models: attn_implementation="sdpa"',
        "unfused_attention",
        (_least(0.01),),
        attention.unfused_attention,
    ),
    Rule(
        "host_sync",
        "The host synchronises with the GPU inside the step",
        "keep values on the GPU inside the step: no .item(), .cpu(), .tolist(), print(tensor) or "
        "torch.cuda.synchronize() there; when training, log the loss every N steps (accumulate "
        "loss.detach() on the GPU); copy results to the host with non_blocking=True into "
        "pinned memory",
        "host_sync",
        (_least(0.01),),
        syncs.host_sync,
        unstepped_title="The host synchronises with the GPU inside the measured work",
        unstepped_fix="keep values on the GPU while the work runs: no .item(), .cpu(), .tolist(), "
        "print(tensor) or torch.cuda.synchronize() in the measured loop; in CUDA C++, "
        "cudaMemcpyAsync and one cudaStreamSynchronize where the result is needed rather than a "
        "synchronous cudaMemcpy or cudaDeviceSynchronize after each kernel; results copied to "
        "the host with non_blocking=True into pinned memory",
    ),
    Rule(
        "sync_copy",
        "Synchronous or pageable host-to-device copies in the step",
        "pinned memory and asynchronous copies: DataLoader(..., pin_memory=True) and "
        "batch.to(device, non_blocking=True) (tensor.pin_memory() for tensors of your own; "
        "cudaHostAlloc and cudaMemcpyAsync in CUDA C++)",
        "sync_copy",
        (_least(0.01),),
        syncs.sync_copy,
        unstepped_title="Synchronous or pageable host-to-device copies in the measured work",
    ),
    Rule(
        "exposed_communication",
        "Communication that no compute hides",
        comm.OTHER_FIX,
        "exposed_communication",
        (_least(0.02),),
        comm.exposed_communication,
    ),
    Rule(
        "elementwise_chain",
        "Long chains of short elementwise kernels in one module",
        "torch.compile(model) fuses each chain into one kernel; or a fused operator "
        '(F.gelu(x, approximate="tanh") for a hand-written GELU, F.layer_norm, ...)',
        "elementwise_chain",
        (
            Threshold(
                "short_kernel_ns", 20_000, "a short kernel runs for less than this (GPU only)"
            ),
            Threshold("min_chain", 4, "the least number of kernels of a chain"),
            _least(0.01),
        ),
        chains.elementwise_chain,
    ),
    Rule(
        "data_wait",
        "The GPU waits for data at the start of each step",
        "DataLoader(..., num_workers=N, pin_memory=True, prefetch_factor=2, "
        "persistent_workers=True); preprocessing in the workers; "
        "batch.to(device, non_blocking=True)",
        "data_wait",
        (_least(0.02),),
        data.data_wait,
    ),
    Rule(
        "straggler",
        "A straggler rank and the layer that makes it late",
        "balance the slow rank's work: compare its layer with the other ranks' (uneven "
        "sequence lengths or expert routing, a slower or throttled GPU, another kernel choice)",
        "straggler",
        (_least(0.02),),
        stragglers.straggler,
        tier=CAUSE,
    ),
)


def rule(rule_id: str) -> Rule:
    """The rule called `rule_id`."""
    return next(r for r in RULES if r.id == rule_id)
