"""Steps and phases from what PyTorch records anyway (nsysmap.attribution.recorded_steps).

Real profiles with phase annotations are attributed with those annotations
removed, and the phases their records give are checked against the ones the
annotations gave; forward-only profiles must get no backward. Small built
profiles pin each rule.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from nsysmap.attribution.attribute import attribute
from nsysmap.attribution.normalise import normalise
from nsysmap.attribution.rules import BUILTIN
from nsysmap.core import schemas
from nsysmap.core.profile import NestedProfile, Profile
from nsysmap.flow.verbs import load_profile
from nsysmap.read.nsys.nsys_sqlite import read_sqlite
from nsysmap.read.torch.torch_trace import read_trace
from tests.corpus import corpus_path
from tests.frames import Frames
from tests.torch_traces import AUTOGRAD as TRACE_AUTOGRAD
from tests.torch_traces import complete, kernel, launch, module, op, write_trace

MAIN, AUTOGRAD = 10, 11
TRAINING = ("forward", "backward", "optimizer")


def _raw(path: Path) -> Profile:
    return read_sqlite(path) if path.suffix == ".sqlite" else read_trace(path)


def _without(raw: Profile, *, optimizer: bool = False, steps: bool = False) -> NestedProfile:
    """`raw` normalised without the ranges that name phases: the users' own
    (`## forward ##`, `backward pass`, ...); PyTorch's `Optimizer.step#...` too
    when `optimizer`; the step ranges too when `steps`."""
    name = pl.col("name")
    drop = BUILTIN.phase_expr(name).is_not_null()
    if not optimizer:
        drop = drop & ~name.str.starts_with("Optimizer.")
    if steps:
        drop = drop | BUILTIN.step_expr(name).is_not_null()
    return normalise(replace(raw, ranges=raw.ranges.filter(~drop.fill_null(False))))


def _compared(name: str, **without: bool) -> pl.DataFrame:
    """Ops with the annotated step and phase (`true_*`) beside those found without them."""
    raw = _raw(corpus_path(name))
    truth = attribute(normalise(raw)).select(
        "op_id", "dur_ns", true_step="step", true_phase="phase"
    )
    got = attribute(_without(raw, **without))
    return truth.join(got, on="op_id")


def _agreement(ops: pl.DataFrame) -> float:
    """Share of the GPU time annotated forward, backward or optimizer whose phase agrees."""
    annotated = ops.filter(pl.col("true_phase").is_in(TRAINING))
    agreed = annotated.filter(pl.col("phase") == pl.col("true_phase"))
    return agreed["dur_ns"].sum() / annotated["dur_ns"].sum()


ANNOTATED = [
    ("hta_ddp_ns_resolution_rank0_v100.json.gz", False),
    ("hta_ddp_ns_resolution_rank0_v100.json.gz", True),  # SGD's foreach kernels
    ("param_dlrm_ddp_rank0of8_nccl_alltoall_v100.pt.trace.json", False),
    ("param_dlrm_ddp_rank0of8_nccl_alltoall_v100.pt.trace.json", True),
    ("aiperf_hf_gpt2_train_step_with_modules_stack_b200.json", False),
    ("aiperf_hf_gpt2_train_step_with_modules_stack_b200.json", True),  # AdamW's
    ("cs336a2_small_fwdbwd_emitnvtx_shapes_a100.sqlite", False),
]


@pytest.mark.corpus
@pytest.mark.parametrize(("name", "optimizer"), ANNOTATED)
def test_record_phases_agree_with_the_annotations(name, optimizer):
    ops = _compared(name, optimizer=optimizer)
    assert _agreement(ops) >= 0.95
    recorded = ops.filter(pl.col("phase_source") == "records")
    assert set(recorded["phase"]) >= {"forward", "backward"}
    if optimizer:  # the optimizer's work found without any range naming it
        assert "optimizer" in set(recorded["phase"]) or name.startswith("param_dlrm")


@pytest.mark.corpus
def test_ranges_still_win_where_they_are_kept():
    """Without the users' phase ranges PyTorch's `Optimizer.step#` range still names the
    optimizer: its ops keep phase_source `range`."""
    ops = _compared("aiperf_hf_gpt2_train_step_with_modules_stack_b200.json")
    optimizer = ops.filter(pl.col("true_phase") == "optimizer")
    assert optimizer.height and (optimizer["phase_source"] == "range").all()


@pytest.mark.corpus
def test_with_all_ranges_gone_the_autograd_thread_still_gives_backward():
    """An nsys export without any range: pt_autograd_0's thread name alone."""
    raw = _raw(corpus_path("cs336a2_small_fwdbwd_emitnvtx_shapes_a100.sqlite"))
    truth = attribute(normalise(raw)).select("op_id", true_phase="phase")
    got = attribute(normalise(replace(raw, ranges=raw.ranges.clear())))
    assert _agreement(truth.join(got, on="op_id")) >= 0.95


@pytest.mark.corpus
def test_optimizer_boundaries_split_the_steps_like_profiler_steps():
    ops = _compared("hta_ddp_ns_resolution_rank0_v100.json.gz", optimizer=True, steps=True)
    assert ops["true_step"].n_unique() == 5
    assert (ops["step_source"] == "records").all()
    # one record step per ProfilerStep, and back
    assert (ops.group_by("step").agg(pl.col("true_step").n_unique())["true_step"] == 1).all()
    assert (ops.group_by("true_step").agg(pl.col("step").n_unique())["step"] == 1).all()
    assert sorted(ops["step"].unique()) == [0, 1, 2, 3, 4]


@pytest.mark.corpus
@pytest.mark.parametrize(
    "name",
    [
        "switchtransformer_moe_fwd_with_modules_a100.json",
        "tracelens_bert_small_infer_modules_h100.json.gz",
        "cs336a2_small_fwd_emitnvtx_shapes_a100.sqlite",
    ],
)
def test_forward_only_profiles_get_no_backward(name):
    ops = attribute(load_profile(corpus_path(name)))
    assert not set(ops["phase"].drop_nulls()) & {"backward", "optimizer"}
    assert not (ops["phase_source"] == "records").any()
    assert not (ops["step_source"] == "records").any()


# ---------------------------------------------------------------- built profiles


def _profile(frames: Frames, *, autograd_name: str = "pt_autograd_0") -> NestedProfile:
    threads = pl.DataFrame(
        {"pid": [1, 1], "tid": [MAIN, AUTOGRAD], "thread_name": ["python", autograd_name]},
        schema=schemas.THREADS,
    )
    return replace(frames.profile(), threads=threads)


def _iteration(f: Frames, at: int) -> dict[str, int]:
    """Forward on the main thread, backward on the autograd thread, then foreach Adam."""
    return {
        "copy": f.kernel(MAIN, at, "[CUDA memcpy HtoD]", kind="memcpy"),
        "fwd": f.kernel(MAIN, at + 1, "gemm"),
        "bwd": f.kernel(AUTOGRAD, at + 3, "gemm"),
        "main_in_bwd": f.kernel(MAIN, at + 4, "fill"),
        "bwd_last": f.kernel(AUTOGRAD, at + 5, "gemm"),
        "clip": f.kernel(MAIN, at + 6, "norm"),
        "adam": f.kernel(MAIN, at + 7, "multi_tensor_apply_kernel"),
        "adam_last": f.kernel(MAIN, at + 8, "multi_tensor_apply_kernel"),
    }


def _rows(ops: pl.DataFrame, ids: dict[str, int], *columns: str) -> dict[str, tuple]:
    by_id = {row["op_id"]: tuple(row[c] for c in columns) for row in ops.iter_rows(named=True)}
    return {key: by_id[op] for key, op in ids.items()}


def test_records_alone_give_steps_and_phases():
    f = Frames()
    first, second = _iteration(f, 0), _iteration(f, 20)
    ops = attribute(_profile(f))
    phases = {
        "copy": "forward",  # before the first backward op, not optimizer work
        "fwd": "forward",
        "bwd": "backward",
        "main_in_bwd": None,  # between backward ops, on another thread: not guessed
        "bwd_last": "backward",
        "clip": "optimizer",  # after the last backward op, before the last optimizer kernel
        "adam": "optimizer",
        "adam_last": "optimizer",
    }
    for step, ids in enumerate((first, second)):
        got = _rows(ops, ids, "step", "step_source", "phase", "phase_source")
        assert got == {
            key: (step, "records", phase, None if phase is None else "records")
            for key, phase in phases.items()
        }


def test_no_backward_no_steps_and_no_guessed_phases():
    """The same work without an autograd thread: a forward-only capture of kernels."""
    f = Frames()
    _iteration(f, 0)
    _iteration(f, 20)
    ops = attribute(_profile(f, autograd_name="python"))
    assert ops["phase"].is_null().all() and ops["step"].is_null().all()
    assert ops["phase_source"].is_null().all() and ops["step_source"].is_null().all()


def test_autograd_node_ranges_give_backward_on_any_thread():
    """CPU-side backward runs on the calling thread: the node's range says backward."""
    f = Frames()
    fwd = f.kernel(MAIN, 1, "gemm")
    f.range(MAIN, "autograd::engine::evaluate_function: MmBackward0", 3, 6)
    f.range(MAIN, "MmBackward0", 3, 5)
    bwd = f.kernel(MAIN, 4, "gemm")
    f.range(MAIN, "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 7, 8)
    grad = f.kernel(MAIN, 7, "add")
    ops = attribute(_profile(f, autograd_name="python"))
    got = _rows(ops, {"fwd": fwd, "bwd": bwd, "grad": grad}, "phase", "phase_source")
    assert got == {
        "fwd": ("forward", "records"),
        "bwd": ("backward", "records"),
        "grad": ("backward", "records"),
    }


def test_range_given_phases_and_steps_win():
    f = Frames()
    f.range(MAIN, "ProfilerStep#7", 0, 19)
    f.range(AUTOGRAD, "forward pass", 2, 4)  # a user's range on autograd's thread
    f.range(MAIN, "Optimizer.step#AdamW.step", 7, 9)
    ids = _iteration(f, 0)
    ops = attribute(_profile(f))
    got = _rows(ops, ids, "step", "step_source", "phase", "phase_source")
    assert got["bwd"] == (7, "range", "forward", "range")  # not backward
    assert got["bwd_last"] == (7, "range", "backward", "records")
    assert got["adam"] == (7, "range", "optimizer", "range")
    # the optimizer is named by a range in this step: `clip` is not guessed into it
    assert got["clip"] == (7, "range", None, None)


def test_forward_module_calls_are_forward_in_a_training_step_only():
    f = Frames()
    f.range(MAIN, "nsysmap:fwd:Linear:fc", 0, 3)
    inside = f.kernel(MAIN, 1, "gemm")
    outside = f.kernel(MAIN, 5, "gemm")
    # an evaluation forward after the backward pass: its module call says forward
    f.range(MAIN, "nsysmap:fwd:Linear:fc", 20, 23)
    evaluation = f.kernel(MAIN, 21, "gemm")
    ids = {"inside": inside, "outside": outside, "evaluation": evaluation}
    without_backward = attribute(_profile(f, autograd_name="python"))
    assert _rows(without_backward, ids, "phase", "phase_source") == dict.fromkeys(ids, (None, None))
    f.kernel(AUTOGRAD, 10, "gemm")
    with_backward = attribute(_profile(f))
    assert _rows(with_backward, ids, "phase", "phase_source") == {
        "inside": ("forward", "records"),
        "outside": ("forward", "records"),  # before the first backward op
        "evaluation": ("forward", "records"),
    }


def test_work_after_the_last_optimizer_stays_in_the_last_step():
    """A metric update after the last step's optimizer is no new step; a backward pass
    after it is one."""
    f = Frames()
    _iteration(f, 0)
    last = _iteration(f, 20)
    metric = f.kernel(MAIN, 30, "reduce_kernel")
    ops = attribute(_profile(f))
    assert _rows(ops, {"adam": last["adam_last"], "metric": metric}, "step", "phase") == {
        "adam": (1, "optimizer"),
        "metric": (1, None),  # after the optimizer: no phase by place either
    }
    more = f.kernel(AUTOGRAD, 32, "gemm")
    ops = attribute(_profile(f))
    got = _rows(ops, {"metric": metric, "more": more}, "step", "phase")
    assert got == {"metric": (2, "forward"), "more": (2, "backward")}


def test_work_launched_before_the_capture_gets_no_place():
    """GPU work without a launch call has no place in launch order: work the GPU ran
    before any captured launch (launched before the capture) gets no step, nor a phase
    unless it repeats a captured step's work (below); work between two ops of one step
    and phase on its stream gets theirs."""
    f = Frames()
    earlier = f.kernel(None, 0, "fill_kernel", run_at=-5)
    fwd = f.kernel(MAIN, 0, "gemm")  # runs at 1
    f.kernel(AUTOGRAD, 2, "gemm")  # runs at 3
    lost = f.kernel(None, 0, "gemm", run_at=5)  # its launch call was not recorded
    f.kernel(AUTOGRAD, 6, "gemm")  # runs at 7
    f.kernel(MAIN, 8, "multi_tensor_apply_kernel")  # runs at 9
    ops = attribute(_profile(f))
    got = _rows(ops, {"earlier": earlier, "fwd": fwd, "lost": lost}, "step", "phase")
    assert got == {"earlier": (None, None), "fwd": (0, "forward"), "lost": (0, "backward")}
    sources = _rows(ops, {"lost": lost}, "step_source", "phase_source")
    assert sources == {"lost": ("records", "records")}


_STEP = [(MAIN, "gemm"), (MAIN, "relu"), (AUTOGRAD, "relu_bwd"), (AUTOGRAD, "gemm")]
_STEP += [(MAIN, "multi_tensor_apply_kernel")]
_STEP_PHASES = ["forward", "forward", "backward", "backward", "optimizer"]


@pytest.mark.parametrize("leading", [2, 3, 5])
def test_work_launched_before_the_capture_takes_the_phases_of_the_step_it_repeats(leading):
    """The tail of the step before the capture (no launch calls: the GPU ran it as the
    capture began) repeats the captured steps' tail kernel for kernel: it takes their
    phases, and no step."""
    f = Frames()
    tail = [f.kernel(None, 0, name, run_at=i - 9) for i, (_, name) in enumerate(_STEP[-leading:])]
    steps = [[f.kernel(tid, 20 * s + 2 * i, name) for i, (tid, name) in enumerate(_STEP)]
             for s in range(3)]  # fmt: skip
    ops = attribute(_profile(f))
    by_id = {r["op_id"]: (r["step"], r["phase"]) for r in ops.iter_rows(named=True)}
    assert [by_id[i] for i in tail] == [(None, p) for p in _STEP_PHASES[-leading:]]
    assert [by_id[i] for i in steps[1]] == [(1, p) for p in _STEP_PHASES]
    assert {by_id[i][1] for i in tail} <= set(_STEP_PHASES)


def test_work_before_the_capture_that_repeats_no_step_gets_no_phase():
    """Leading work whose kernels differ from every captured step's there keeps none."""
    f = Frames()
    odd = [f.kernel(None, 0, name, run_at=i - 9) for i, name in enumerate(["fill", "copy"])]
    for s in range(3):
        for i, (tid, name) in enumerate(_STEP):
            f.kernel(tid, 20 * s + 2 * i, name)
    ops = attribute(_profile(f))
    assert ops.filter(pl.col("op_id").is_in(odd))["phase"].to_list() == [None, None]


def _traced_step(at: int, correlation: int) -> list[dict]:
    """One SGD step as torch.profiler records it: a module call with a convolution, its
    backward node on autograd's thread, `Optimizer.zero_grad#` and `Optimizer.step#` with
    a foreach kernel; no ProfilerStep, no phase annotation."""
    bwd = {"tid": TRACE_AUTOGRAD}
    return [
        module("ResNet", at, 10, 0),
        op("aten::conv2d", at + 1, 5),
        launch(at + 2, correlation),
        kernel("implicit_convolve_sgemm", at + 3, 4, correlation),
        op("autograd::engine::evaluate_function: ConvolutionBackward0", at + 11, 8, **bwd),
        launch(at + 12, correlation + 1, tid=TRACE_AUTOGRAD),
        kernel("wgrad_alg0_engine", at + 13, 6, correlation + 1),
        complete("user_annotation", "Optimizer.zero_grad#SGD.zero_grad", at + 20, 2),
        complete("user_annotation", "Optimizer.step#SGD.step", at + 23, 6),
        op("aten::_foreach_add_", at + 24, 4),
        launch(at + 25, correlation + 2),
        kernel("multi_tensor_apply_kernel", at + 26, 2, correlation + 2),
    ]


def test_a_traced_training_loop_without_annotations_gets_steps_and_phases(tmp_path):
    """Five steps of a torch.profiler trace with module frames and only PyTorch's own
    optimizer annotations: every kernel forward, backward or optimizer, five steps."""
    names = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": TRACE_AUTOGRAD,
              "args": {"name": "pt_autograd_0"}}]  # fmt: skip
    events = names + [e for i in range(5) for e in _traced_step(100 * i, 10 * i + 1)]
    ops = attribute(load_profile(write_trace(tmp_path / "resnet.json", events)))
    assert ops["phase"].to_list() == ["forward", "backward", "optimizer"] * 5
    assert ops["step"].to_list() == [s for s in range(5) for _ in range(3)]
    assert set(ops["step_source"]) == {"records"}
    # the backward work's phase is the records'; the optimizer's PyTorch's own range's
    assert ops["phase_source"].to_list() == ["records", "records", "range"] * 5
