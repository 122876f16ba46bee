"""Inference of whole training steps repeated, and of repeats that are no network at all.

A CNN's training step has few repeated blocks; repeated back to back without
long host gaps, the whole step is the motif that covers most. An optimizer
kernel in one copy of it says the copy is a step (a pass), not a block.
A sequence without any network kernel (a CUDA sample launching vecAdd over
and over) repeats, but has no forward pass.
"""

from __future__ import annotations

import random

import numpy as np
import polars as pl
import pytest

from nsysmap.flow.verbs import analyse, load_profile
from nsysmap.infer.label import Found
from nsysmap.infer.motif import Region
from nsysmap.infer.repeats import Evidence, passes
from nsysmap.infer.summary import GUESS, LAYER_INDEX, _weak_line, infer_ops
from tests.corpus import corpus_path
from tests.test_infer import TRUE_PHASE, _hidden, _share
from tests.test_infer_noise import _ops

FORWARD = [("convolution", "conv"), ("normalization", "bn_fw"), ("elementwise", "relu")]
BACKWARD = [("elementwise", "relu_bwd"), ("normalization", "bn_bw"), ("convolution", "dgrad")]
BACKWARD += [("convolution", "wgrad")]


def _steps(
    steps: int, blocks: int, optimizer: bool, tail: bool = True, seed: int = 0
) -> pl.DataFrame:
    """`steps` training steps back to back, no long host gap between them: a stem,
    `blocks` forward blocks on thread 1, their backward on thread 2 (autograd's),
    then (with `optimizer`) an optimizer kernel on thread 1; with `tail`, a kernel of
    other work after the last step. Launch gaps vary at random."""
    rnd = random.Random(seed)
    rows, tids, t = [], [], 0
    stem = [("convolution", "stem"), ("elementwise", "pool")]
    head = [("gemm", "fc"), ("softmax", "loss")]
    for _ in range(steps):
        plan = [(k, 1) for k in stem + FORWARD * blocks + head]
        plan += [(k, 2) for k in BACKWARD * blocks + [("elementwise", "fc_bwd")]]
        plan += [(("optimizer", "multi_tensor_apply_kernel"), 1)] if optimizer else []
        plan += [(("elementwise", "fill"), 1)]  # zero_grad
        for (category, short), tid in plan:
            rows.append((t, category, short, f"void {short}<float>()", 7, None))
            tids.append(tid)
            t += rnd.randrange(1_000, 30_000)
    if tail:
        rows.append((t, "reduction", "metric", "void metric<float>()", 7, None))
        tids.append(1)
    return _ops(rows).with_columns(tid=pl.Series(tids, dtype=pl.Int64))


def test_a_repeated_motif_holding_an_optimizer_kernel_is_a_pass_each_time():
    """Mechanism: whole steps repeat exactly, without long host gaps; with an optimizer
    kernel in each, every copy is a pass (with a backward), never a block."""
    inferred = infer_ops(_steps(5, 3, optimizer=True))
    (found,) = inferred.found
    assert found.steps == 5
    assert found.backward
    labels = inferred.labels
    assert labels["inferred_step"].n_unique() == 5
    assert set(labels["inferred_phase"]) >= {"forward", "backward", "optimizer"}
    # The same steps without an optimizer kernel: nothing says a copy is a step.
    assert infer_ops(_steps(5, 3, optimizer=False)).found[0].steps == 1


def test_passes_back_to_back_that_end_the_sequence_are_passes():
    """Mechanism: the only stack runs to the end of the sequence (no head after it, as a
    model's blocks have): its copies are passes (a warm-up and a measured pass)."""
    assert infer_ops(_steps(2, 3, optimizer=False, tail=False)).found[0].steps == 2


def test_passes_take_the_optimizer_evidence_per_position():
    # A stem, two blocks, a head, backward, optimizer (8) and zero_grad, four times.
    codes = np.array(([1, 2, 10, 11, 12] + [3, 4, 5] * 2 + [6, 7, 13, 14, 8, 9]) * 4)
    gaps = np.full(codes.size, 1_000)
    optimizer = codes == 8
    steps, period = passes(codes, gaps, Evidence(optimizer))
    assert period is None  # no host gap marks them
    assert steps.max() == 3
    # each step ends with its optimizer: the next pass opens with its zero_grad's fill
    ends = np.flatnonzero(np.diff(steps))
    assert np.array_equal(codes[ends], [8, 8, 8]) and np.array_equal(codes[ends + 1], [9, 9, 9])
    assert passes(codes, gaps)[0].max() == 0


def test_a_host_gap_inside_the_step_does_not_cut_it():
    """Mechanism: the host's longest gap falls inside each step (a wait for a result in
    the backward), not between steps; the passes still end with their optimizer bursts,
    and a first pass launched before the capture (the step before's tail) joins the next."""
    one = [1, 2, 10, 11, 12] + [3, 4, 5] * 2 + [6, 7, 13, 14, 8, 8, 9]
    codes = np.array(one[-5:] + one * 4)
    gaps = np.full(codes.size, 1_000)
    gaps[np.flatnonzero(codes == 13)] = 5_000_000  # the host waits before code 13
    unlaunched = np.arange(codes.size) < 5
    steps, _ = passes(codes, gaps, Evidence(codes == 8, unlaunched=unlaunched))
    assert steps.max() == 3
    ends = np.flatnonzero(np.diff(steps))
    assert np.array_equal(codes[ends], [8, 8, 8])
    assert steps[:5].tolist() == [0] * 5  # the tail of the step before: in the first pass


def _gapped_passes(unmarked: list[int], copies: int = 3, count: int = 5) -> tuple:
    """`copies` set-up copies, then `count` forward passes (a stem, four blocks, a head)
    with a long host gap before each but those in `unmarked` (0 = the first)."""
    one = [1, 2] + [3, 4, 5, 6] * 4 + [7, 8]
    codes = np.array([9] * copies + one * count)
    gaps = np.full(codes.size, 2_000)
    firsts = copies + len(one) * np.arange(count)
    gaps[firsts] = 3_000_000
    gaps[firsts[unmarked]] = 2_000
    return codes, gaps, firsts


@pytest.mark.parametrize("unmarked", [[0], [1], [2], [4]], ids=str)
def test_a_pass_boundary_no_host_gap_marks_is_still_a_boundary(unmarked):
    """Mechanism: host gaps mark all pass boundaries but one (a slowly launched
    warm-up pass and a timed loop right after it); the missing ones are found one
    period from their neighbours, where the pass repeats. The set-up copies before the
    first pass are a pass of their own where a gap follows them, else part of the first."""
    codes, gaps, firsts = _gapped_passes(unmarked)
    steps, period = passes(codes, gaps)
    assert period == firsts[1] - firsts[0]
    cut = firsts if 0 not in unmarked else firsts[1:]
    assert np.flatnonzero(np.diff(steps)).tolist() == (cut - 1).tolist()


def test_a_stretch_that_does_not_repeat_the_pass_is_not_cut():
    """Mechanism: a long stretch of other work before the marked passes (no repeat of
    the pass at one period before the first) stays whole: only repeats are cut."""
    codes, gaps, firsts = _gapped_passes([0], copies=40)
    codes[:40] = np.arange(100, 140)
    steps, _ = passes(codes, gaps)
    assert np.flatnonzero(np.diff(steps)).tolist() == (firsts[1:] - 1).tolist()


@pytest.mark.corpus
def test_ddp_resnet_steps_come_out_as_passes_with_their_phases():
    """The DDP ResNet trace (torch.profiler, five training steps, each repeated whole and
    separated by irregular host gaps), its ranges hidden: five passes, one to one with
    the five measured steps, forward, backward and optimizer; no step taken for a block."""
    ops = analyse(load_profile(corpus_path("hta_ddp_ns_resolution_rank0_v100.json.gz")))
    ops = ops.ops
    inferred = infer_ops(_hidden(ops))
    (found,) = inferred.found
    assert found.steps == 5 and found.backward
    assert all(r.length < 1000 for r in found.regions)  # a step has ~1,200 kernels
    joined = ops.join(inferred.labels, on=["op_id", "device_id"])
    pairs = joined.group_by("step", "inferred_step").len()
    assert pairs.height == pairs["step"].n_unique() == pairs["inferred_step"].n_unique() == 5
    true_phase = pl.col("phase").replace_strict(TRUE_PHASE, default=None)
    agree = _share(joined, true_phase == pl.col("inferred_phase"), true_phase.is_not_null())
    assert agree >= 0.95


def _no_network(rows: int) -> pl.DataFrame:
    """A CUDA sample: copy in, copy in, vecAdd, copy out, over and over."""
    plan = [("memcpy", "[CUDA memcpy HtoD]")] * 2 + [("other", "vecAdd")]
    plan += [("memcpy", "[CUDA memcpy DtoH]")]
    return _ops([(i * 1_000, *plan[i % 4], plan[i % 4][1], 7, None) for i in range(rows)])


def test_repeats_without_network_kernels_are_not_called_forward():
    inferred = infer_ops(_no_network(400))
    (found,) = inferred.found
    assert not found.network
    assert "forward" not in set(inferred.labels["inferred_phase"])
    line = inferred.lines(cpu=False)[0]
    # The motif holds copies: it counts operations, not kernels.
    assert "repeats of 4 operations" in line and "forward" not in line and "block" not in line
    assert found.copies == (True,)
    # gtls_cupy: "100 repeats of 7 kernels per pass" where no pass was found
    assert "per pass" not in line


@pytest.mark.corpus
def test_the_vecadd_sample_repeats_and_has_no_forward():
    ops = analyse(load_profile(corpus_path("vecadd_streams_t4_gpu4.sqlite"))).ops
    inferred = infer_ops(ops)
    assert "forward" not in set(inferred.labels["inferred_phase"])
    assert all("forward" not in line and "repeats of" in line for line in inferred.lines(cpu=False))


LAYER = [("normalization", "layer_norm"), ("gemm", "qkv"), ("softmax", "softmax_fw")]
LAYER += [("gemm", "proj"), ("elementwise", "add"), ("gemm", "router"), ("sort", "topk")]
AFTER_SYNC = [("elementwise", "cat_copy"), ("gemm", "expert_up"), ("elementwise", "gelu")]
AFTER_SYNC += [("gemm", "expert_down"), ("reduction", "reduce"), ("elementwise", "add")]
DTOH = ("memcpy", "[CUDA memcpy DtoH]")


def _host_waits(passes_: int, layers: int, in_layer: bool, copy: bool = True) -> pl.DataFrame:
    """`passes_` forward passes of `layers` layers; the host waits 30 ms for a device-to-host
    copy (`copy`) in every layer (`in_layer`: a mixture of experts reading its routing)
    or once at the end of each pass (a decoding step reading its token)."""
    rows, t = [], 0
    wait = [DTOH] if copy else []
    for _ in range(passes_):
        plan = [(("elementwise", "embedding"), None)]
        for layer in range(layers):
            plan += [(k, layer) for k in LAYER + (wait if in_layer else [])]
            plan += [(("wait", ""), None)] if in_layer else []
            plan += [(k, layer) for k in AFTER_SYNC]
        plan += [(("gemm", "lm_head"), None)] + [(k, None) for k in wait]
        plan += [(("wait", ""), None)]
        for (category, short), layer in plan:
            if category == "wait":
                t += 30_000_000
                continue
            rows.append((t, category, short, f"void {short}<float>()", 7, layer))
            t += 5_000
    return _ops(rows)


def test_host_waits_inside_every_layer_are_no_pass_boundaries():
    """Mechanism: a device-to-host copy, then a long host gap, inside every layer (and
    no optimizer kernel, no stack of blocks between two gaps): the gaps are the host
    reading the GPU's routing, not passes; one pass of as many blocks as layers."""
    ops = _host_waits(1, 8, in_layer=True)
    inferred = infer_ops(ops)
    (found,) = inferred.found
    assert found.steps == 1 and found.period is None
    joined = ops.join(inferred.labels, on=["op_id", "device_id"])
    assert joined["inferred_block"].drop_nulls().n_unique() == 8
    layer = pl.col("layer").is_not_null()
    assert _share(joined, pl.col("layer") == pl.col("inferred_block"), layer) >= 0.9
    # The same gaps without the copy before them still mark passes.
    assert infer_ops(_host_waits(1, 8, in_layer=True, copy=False)).found[0].steps >= 8


def test_host_waits_between_passes_of_blocks_stay_pass_boundaries():
    """A decoding loop reads each token back (a copy, then a long gap) after a whole
    stack of layers: those gaps are passes."""
    inferred = infer_ops(_host_waits(4, 6, in_layer=False))
    (found,) = inferred.found
    assert found.steps == 4 and found.period is not None
    assert inferred.labels["inferred_block"].drop_nulls().n_unique() == 6


@pytest.mark.corpus
def test_switch_transformer_layers_are_blocks_not_passes():
    """The Switch-Transformer forward (torch.profiler, 10 `SwitchTransformerBlock_N`, each
    reading its routing back to the host), modules hidden: one pass of 10 blocks that
    agree with the modules for at least 90 % of their time, 80 % of the time placed."""
    name = "switchtransformer_moe_fwd_with_modules_a100.json"
    ops = analyse(load_profile(corpus_path(name))).ops
    inferred = infer_ops(_hidden(ops))
    (found,) = inferred.found
    assert found.steps == 1 and not found.backward
    joined = ops.join(inferred.labels, on=["op_id", "device_id"])
    assert joined["inferred_block"].drop_nulls().n_unique() == 10
    layer = pl.col("module").str.extract(LAYER_INDEX).cast(pl.Int64)
    assert _share(joined, layer == pl.col("inferred_block"), layer.is_not_null()) >= 0.9
    assert _share(joined, pl.col("inferred_region").is_not_null(), pl.lit(True)) >= 0.8


MOTIF = [("normalization", "layer_norm"), ("gemm", "qkv"), ("elementwise", "split")]
MOTIF += [("attention", "flash_fwd"), ("gemm", "proj"), ("elementwise", "add")]
MOTIF += [("normalization", "layer_norm"), ("gemm", "fc"), ("elementwise", "gelu")]
MOTIF += [("gemm", "fc2"), ("elementwise", "add"), ("elementwise", "copy")]
MOTIF_BACK = [("gemm", "fc2_dgrad"), ("elementwise", "gelu_bwd"), ("gemm", "fc_dgrad")]
MOTIF_BACK += [("normalization", "layer_norm_bwd"), ("attention", "flash_bwd")]
MOTIF_BACK += [("gemm", "qkv_dgrad"), ("reduction", "sum")]


def _one_step(layers: int) -> pl.DataFrame:
    """One training step: `layers` forward blocks, a head whose kernels begin like a
    block, a loss backward (on autograd's thread) whose kernels go on like one, the
    backward blocks, the optimizer."""
    plan = [(("elementwise", "embedding"), 1, None)]
    plan += [(k, 1, layer) for layer in range(layers) for k in MOTIF]
    plan += [(k, 1, None) for k in MOTIF[:5]]  # final norm, head, loss
    plan += [(k, 2, None) for k in MOTIF[5:]]  # the loss's backward
    plan += [(k, 2, layer) for layer in reversed(range(layers)) for k in MOTIF_BACK]
    plan += [(("optimizer", "multi_tensor_apply_kernel"), 1, None)] * 3
    rows = [
        (i * 20_000, *k, f"void {k[1]}<float>()", 7, layer) for i, (k, _, layer) in enumerate(plan)
    ]
    return _ops(rows).with_columns(tid=pl.Series([tid for _, tid, _ in plan], dtype=pl.Int64))


def test_a_forward_block_never_runs_on_into_the_backward_thread():
    """Mechanism: the kernels after the last forward block repeat a block's, half on
    the forward thread, half on autograd's: no third forward block of those."""
    ops = _one_step(2)
    inferred = infer_ops(ops)
    joined = ops.join(inferred.labels, on=["op_id", "device_id"])
    forward = joined.filter(pl.col("inferred_phase") == "forward")
    assert forward["inferred_block"].drop_nulls().n_unique() == 2
    # No forward block holds autograd's launches; the blocks lie within a few kernels
    # of the layers (the head's repeat of a block's start shifts them by two).
    in_block = pl.col("inferred_region") == "block"
    assert forward.filter(in_block, pl.col("tid") == 2).is_empty()
    layer = pl.col("layer").is_not_null()
    assert _share(joined, pl.col("layer") == pl.col("inferred_block"), layer) >= 0.85


@pytest.mark.corpus
def test_gpt2_training_step_gets_its_two_blocks():
    """The HF GPT-2 training step (torch.profiler, 2 `GPT2Block_N`, one step), modules and
    phase ranges hidden: 2 forward blocks and their backward, >= 90 % of the layers' time
    in the right block, >= 95 % of the phased time in the right phase."""
    name = "aiperf_hf_gpt2_train_step_with_modules_stack_b200.json"
    ops = analyse(load_profile(corpus_path(name))).ops
    inferred = infer_ops(_hidden(ops))
    (found,) = inferred.found
    assert found.steps == 1 and found.backward
    assert [r.repeats for r in found.regions] == [2, 2]
    joined = ops.join(inferred.labels, on=["op_id", "device_id"])
    layer = pl.col("module").str.extract(LAYER_INDEX).cast(pl.Int64)
    assert _share(joined, layer == pl.col("inferred_block"), layer.is_not_null()) >= 0.9
    true_phase = pl.col("phase").replace_strict(TRUE_PHASE, default=None)
    agree = _share(joined, true_phase == pl.col("inferred_phase"), true_phase.is_not_null())
    assert agree >= 0.95


@pytest.mark.corpus
def test_alexnet_warmup_and_measured_pass_are_two_passes():
    """The AlexNet benchmark (torch.profiler, a warm-up and a measured forward pass back
    to back, each in its own `...|warmup|forward` / `...|measure|forward` range), ranges
    hidden: two passes, each the whole of one range, no backward."""
    name = "hta_param_alexnet_warmup_measure_annotations_a100.json.gz"
    ops = analyse(load_profile(corpus_path(name))).ops
    inferred = infer_ops(_hidden(ops))
    (found,) = inferred.found
    assert found.steps == 2 and not found.backward
    which = pl.col("range_path").str.extract(r"\|(warmup|measure)\|forward\]")
    joined = ops.join(inferred.labels, on=["op_id", "device_id"]).with_columns(which=which)
    pairs = joined.filter(pl.col("which").is_not_null()).group_by("which", "inferred_step").len()
    assert pairs.height == 2 and set(pairs["inferred_step"]) == {0, 1}
    # weak here (few kernels repeat), and said without "passes" beside the structure's
    # "1 forward pass" measured and "1 forward pass" of warm-up
    (line,) = inferred.lines(cpu=False)
    assert "weak): no clear repeating structure (at best the sequence of operations" in line
    assert "pass" not in line


@pytest.mark.parametrize(
    ("steps", "regions", "said"),
    [
        (
            2,
            (Region(0, 4, 2),),
            "(at best the sequence of operations repeats 2 times, with"
            " 2 repeating blocks of 4 kernels in it, confidence 0.5)",
        ),
        (1, (Region(0, 4, 2),), "(at best 2 repeating blocks of 4 kernels, confidence 0.5)"),
        (3, (), "(at best the sequence of operations repeats 3 times, confidence 0.5)"),
        (1, (), "(confidence 0.5)"),
    ],
)
def test_a_weak_line_says_what_repeats_at_best_and_never_passes(steps, regions, said):
    found = Found(device_id=0, steps=steps, period=None, regions=regions, confidence=0.5)
    line = _weak_line(found, "device 0 (inferred", cpu=False)
    assert line == f"device 0 (inferred, weak): no clear repeating structure {said}; " + GUESS


def _mlp_step(before_capture: int) -> pl.DataFrame:
    """One training step of a model without repeated blocks: distinct forward kernels on
    thread 1, distinct backward kernels on thread 2 (autograd's), the optimizer on
    thread 1; the first `before_capture` ops were launched before the capture began
    (no launching thread: -1)."""
    forward = [("gemm", f"fc{i}") for i in range(4)] + [("softmax", "loss")]
    backward = [("gemm", f"fc{i}_dgrad") for i in reversed(range(4))]
    plan = [(k, 1) for k in forward] + [(k, 2) for k in backward]
    plan += [(("optimizer", "multi_tensor_apply_kernel"), 1)]
    rows = [(i * 20_000, *k, f"void {k[1]}()", 7, None) for i, (k, _) in enumerate(plan)]
    tids = [-1 if i < before_capture else tid for i, (_, tid) in enumerate(plan)]
    return _ops(rows).with_columns(tid=pl.Series(tids, dtype=pl.Int64))


@pytest.mark.parametrize("before_capture", [0, 2])
def test_autograd_thread_marks_backward_without_a_mirrored_motif(before_capture):
    """Mechanism: no repeated block, but the second half of the pass is launched by
    another thread than its first launched kernel: backward from there, forward before."""
    ops = _mlp_step(before_capture)
    inferred = infer_ops(ops)
    assert inferred.found[0].backward
    phases = inferred.labels.sort("op_id")["inferred_phase"].to_list()
    assert phases == ["forward"] * 5 + ["backward"] * 4 + ["optimizer"]


def _plain_optimizer_step(before_capture: int = 0) -> pl.DataFrame:
    """`_mlp_step` with an optimizer of plain elementwise kernels (Adagrad's, one pair per
    parameter, launched by the main thread after autograd's thread is done) and a metric's
    sum, the step's last `before_capture` kernels also at the head, launched before
    the capture (tid -1)."""
    step = _mlp_step(0).filter(pl.col("category") != "optimizer")
    rows = [("elementwise", "addcmul"), ("elementwise", "addcdiv")] * 6
    rows += [("reduction", "sum")]  # a metric after the step
    head = rows[len(rows) - before_capture :] if before_capture else []
    kernels = [(c, k) for c, k in head] + [
        (c, k) for c, k in step.select("category", "short_name").iter_rows()
    ]
    kernels += rows
    tids = [-1] * len(head) + step["tid"].to_list() + [1] * len(rows)
    ops = _ops([(i * 20_000, c, k, f"void {k}()", 7, None) for i, (c, k) in enumerate(kernels)])
    return ops.with_columns(tid=pl.Series(tids, dtype=pl.Int64))


@pytest.mark.parametrize("before_capture", [0, 6])
def test_the_main_threads_work_after_autograds_is_the_optimizer(before_capture):
    """Mechanism: what the pass's first thread launches after autograd's thread is done
    is the optimizer's step, even of plain elementwise kernels; its loop over the
    parameters repeats but is no block. Kernels launched before the capture that repeat
    the pass's tail take its phases."""
    ops = _plain_optimizer_step(before_capture)
    inferred = infer_ops(ops)
    (found,) = inferred.found
    assert found.backward and not found.regions
    phases = inferred.labels.sort("op_id")["inferred_phase"].to_list()
    want = ["forward"] * 5 + ["backward"] * 4 + ["optimizer"] * 13
    assert phases == ["optimizer"] * before_capture + want
    assert inferred.labels["inferred_block"].is_null().all()
    (line,) = inferred.lines(cpu=False)
    assert "weak" in line and line.endswith("backward: what autograd's thread launched")


def test_one_thread_alone_gives_no_backward():
    ops = _mlp_step(0).with_columns(tid=pl.lit(1, pl.Int64))
    inferred = infer_ops(ops)
    assert not inferred.found[0].backward
    assert "backward" not in set(inferred.labels["inferred_phase"])


@pytest.mark.corpus
@pytest.mark.parametrize(
    ("name", "agree"),
    [
        ("param_dlrm_ddp_rank0of8_nccl_alltoall_v100.pt.trace.json", 0.79),
        ("param_dlrm_ddp_rank1of8_nccl_alltoall_v100.pt.trace.json", 0.88),
    ],
)
def test_dlrm_backward_from_autograds_thread(name, agree):
    """DLRM (no repeated blocks; rank 1 starts with the previous step's optimizer kernels,
    launched before the capture): one pass, its backward found from the launching thread;
    phases agree for 79.8 % and 89.1 % of the phased time (docs/inference.md); Adagrad's
    elementwise kernels after autograd's thread is done are the optimizer."""
    ops = analyse(load_profile(corpus_path(name))).ops
    inferred = infer_ops(_hidden(ops))
    (found,) = inferred.found
    assert found.steps == 1 and found.backward
    assert found.regions == ()  # no layer repeats: no block (an optimizer loop is none)
    joined = ops.join(inferred.labels, on=["op_id", "device_id"])
    true_phase = pl.col("phase").replace_strict(TRUE_PHASE, default=None)
    assert _share(joined, true_phase == pl.col("inferred_phase"), true_phase.is_not_null()) >= agree
    optimizer = joined.filter(true_phase == "optimizer")
    assert _share(optimizer, pl.col("inferred_phase") == "optimizer", pl.lit(True)) >= 0.99


def test_a_metric_update_repeated_per_metric_is_no_block():
    """Mechanism: a motif without any layer kernel (GEMM, attention, convolution,
    normalisation, softmax, routing), in a pass that has them, is no layer: eight
    metrics updated alike after a model's step repeat, and are no blocks."""
    metric = [("reduction", "sum"), ("elementwise", "div"), ("elementwise", "add")]
    plan = [(k, 1) for k in [("gemm", "fc0"), ("gemm", "fc1"), ("softmax", "loss")]]
    plan += [(k, 1) for k in metric * 8]
    rows = [(i * 20_000, c, k, f"void {k}()", 7, None) for i, ((c, k), _) in enumerate(plan)]
    inferred = infer_ops(_ops(rows))
    (found,) = inferred.found
    assert found.regions == ()
    assert inferred.labels["inferred_block"].is_null().all()
    # the same motif with a GEMM in it is a layer: eight blocks
    layer = [("gemm", "proj"), *metric]
    plan = [(k, 1) for k in [("gemm", "fc0"), *layer * 8, ("softmax", "loss")]]
    rows = [(i * 20_000, c, k, f"void {k}()", 7, None) for i, ((c, k), _) in enumerate(plan)]
    assert [r.repeats for r in infer_ops(_ops(rows)).found[0].regions] == [8]


@pytest.mark.corpus
def test_recsys_steps_come_out_as_passes_that_end_with_their_optimizer():
    """The TorchRec recommender trace (five ProfilerSteps with `## forward ##`,
    `## backward ##`, `## optimizer ##` ranges; the tail of the step before the capture
    first, launched before it), its ranges hidden: five passes, each cut after its
    FusedAdam burst (the host's longest gap falls inside the step), backward from
    autograd's thread, no blocks (no layer repeats; eight metric updates do), and
    phases that agree for 86 % of the time (docs/inference.md)."""
    ops = analyse(load_profile(corpus_path("hta_recsys_shapes_rank0_a100.json.gz"))).ops
    inferred = infer_ops(_hidden(ops))
    (found,) = inferred.found
    assert found.steps == 5 and found.backward and found.regions == ()
    (line,) = inferred.lines(cpu=False)
    said = "weak): the sequence of operations repeats 5 times, with no repeating blocks in it"
    assert said in line
    joined = ops.join(inferred.labels, on=["op_id", "device_id"])
    true_phase = pl.col("phase").replace_strict(TRUE_PHASE, default=None)
    assert _share(joined, true_phase == pl.col("inferred_phase"), true_phase.is_not_null()) >= 0.85
    # every pass but the last (a metric update follows its burst) ends with optimizer work
    order = joined.filter(pl.col("stream_id") == 7).sort(pl.coalesce("launch_start_ns", "start_ns"))
    last = order.group_by("inferred_step", maintain_order=True).last().head(4)
    assert last["category"].to_list() == ["optimizer"] * 4


@pytest.mark.corpus
def test_fsdp_blocks_that_wait_on_a_host_copy_are_blocks_not_passes():
    """fastvideo's window of an FSDP training run (two ranks): 16 checkpointed blocks of
    157 kernels, each ending in a pageable host-to-device copy the host waits ~10 ms on.
    Those gaps are no pass boundaries: one forward pass, its blocks one to one with
    `blocks.N` (rank 0's window opens inside block 2, whose range began before it)."""
    ops = analyse(load_profile(corpus_path("fastvideo_training_mfu_h100x2_before.sqlite"))).ops
    inferred = infer_ops(_hidden(ops))
    assert [(f.steps, f.backward) for f in inferred.found] == [(1, False), (1, False)]
    joined = ops.join(inferred.labels, on=["op_id", "device_id"])
    layer = pl.col("module").str.extract(LAYER_INDEX).cast(pl.Int64)
    for device in (0, 1):
        on = joined.filter(pl.col("device_id") == device).with_columns(layer=layer)
        named = on.filter(pl.col("layer").is_not_null() & pl.col("inferred_block").is_not_null())
        offset = named.select((pl.col("layer") - pl.col("inferred_block")).mode().first()).item()
        same = (pl.col("layer") - offset) == pl.col("inferred_block")
        assert _share(on, same, pl.col("layer").is_not_null()) >= 0.9
        assert on["inferred_block"].drop_nulls().n_unique() in (16, 17)


def _alternating(layers: int, passes: int) -> np.ndarray:
    """`passes` forward passes back to back: a stem, `layers` layers of two kinds in
    turn (the first kind has one kernel more, as a sliding-window attention layer
    beside a full one), a head."""
    full = list(range(10, 27))  # 17 kernels
    sliding = [30, *full]  # the same and one more
    one = [1, 2] + [k for i in range(layers) for k in (sliding if i % 2 == 0 else full)] + [3, 4, 5]
    return np.array(one * passes)


def test_layers_of_two_kinds_in_turn_are_one_pass_not_passes_of_two_layers():
    """Mechanism: exact repeats of a layer stop at every layer of the other kind (one
    kernel more), cutting the blocks into pairs; a stack that tolerates the inserted
    kernel joins them, so one pass holds them all, as a decode step does."""
    codes = _alternating(24, 1)
    steps, period = passes(codes, np.full(codes.size, 1_000))
    assert period is None
    assert steps.max() == 0


def test_passes_of_alternating_layers_back_to_back_are_still_passes():
    """Mechanism: the stem and head between two passes break the tolerant stack too, so
    passes of such a model, back to back, stay passes."""
    codes = _alternating(6, 3)
    steps, _ = passes(codes, np.full(codes.size, 1_000))
    assert steps.max() == 2
    cuts = np.flatnonzero(np.diff(steps)) + 1
    assert set(codes[cuts].tolist()) <= {1, 2, 3, 4, 5}  # between a head and a stem


@pytest.mark.parametrize(
    ("stem", "head", "blocks"),
    [([1], [], 12), ([1], [2], 12), ([1], [2], 32), ([], [10, 2], 8)],
    ids=["stem", "stem-head", "stem-head-32", "head-like-a-block-8"],
)
def test_passes_back_to_back_with_a_short_stem_and_head_stay_passes(stem, head, blocks):
    """Mechanism: passes of many blocks run back to back with only a kernel or two
    between them (a tolerant stack spans them all): only stacks a few motif lengths
    apart are joined, so each pass stays one."""
    block = list(range(10, 30))
    codes = np.array((stem + block * blocks + head) * 3)
    steps, _ = passes(codes, np.full(codes.size, 1_000))
    assert steps.max() == 2
