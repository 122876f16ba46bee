"""Attribution on hand-built reports (ms timings) and against the reference."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsysmap.attribution.attribute import attribute
from tests.frames import MS, Frames
from tests.reference import range_given, reference_attribution
from tests.strategies import forest

MAIN, AUTOGRAD = 1, 2


def _row(ops: pl.DataFrame, op_id: int) -> dict:
    return ops.filter(pl.col("op_id") == op_id).row(0, named=True)


def _training_step() -> tuple[Frames, dict[str, int]]:
    """One GPT-2-like step: phases on the main thread, backward on the autograd thread."""
    f = Frames()
    f.range(MAIN, "nsysmap:step:0", 0, 100)
    f.range(MAIN, "nsysmap:phase:data", 0, 5)
    f.range(MAIN, "nsysmap:phase:zero_grad", 5, 8)
    f.range(MAIN, "nsysmap:phase:forward", 10, 40)
    f.range(MAIN, "nsysmap:fwd:GPT2LMHeadModel:", 10, 40)
    f.range(MAIN, "nsysmap:fwd:GPT2Block:transformer.h.0", 11, 30)
    f.range(MAIN, "nsysmap:fwd:Conv1D:transformer.h.0.attn.c_attn", 12, 15)
    f.range(MAIN, "nsysmap:phase:loss", 40, 45)
    f.range(MAIN, "nsysmap:phase:backward", 50, 90)
    f.range(AUTOGRAD, "nsysmap:bwd:GPT2Block:transformer.h.0", 55, 80)
    f.range(AUTOGRAD, "nsysmap:bwd:Conv1D:transformer.h.0.attn.c_attn", 60, 65)
    f.range(MAIN, "nsysmap:phase:optimizer", 90, 99)
    ids = {
        "fwd_gemm": f.kernel(MAIN, 13, "ampere_sgemm_128x64_tn"),
        "fwd_block": f.kernel(MAIN, 20, "vectorized_elementwise_kernel"),
        "loss": f.kernel(MAIN, 42, "cunn_SoftMaxForward"),
        "bwd_gemm": f.kernel(AUTOGRAD, 62, "ampere_sgemm_64x64_nn"),
        "bwd_outside_module": f.kernel(AUTOGRAD, 85, "reduce_kernel"),
        "optimizer": f.kernel(MAIN, 95, "multi_tensor_apply_kernel"),
        "after_step": f.kernel(MAIN, 120, "vectorized_elementwise_kernel"),
        "no_launch": f.kernel(None, 0, "ncclDevKernel_AllReduce", run_at=130),
        "memcpy": f.kernel(MAIN, 3, "[CUDA memcpy HtoD]", kind="memcpy"),
    }
    return f, ids


def test_training_step_by_hand():
    f, ids = _training_step()
    ops = attribute(f.profile())
    fwd = _row(ops, ids["fwd_gemm"])
    assert (fwd["step"], fwd["phase"], fwd["module"], fwd["module_class"]) == (
        0,
        "forward",
        "transformer.h.0.attn.c_attn",
        "Conv1D",
    )
    assert fwd["direction"] == "forward" and fwd["attribution"] == "range"
    assert fwd["category"] == "gemm" and fwd["range_depth"] == 5
    assert fwd["range_path"] == (
        "nsysmap:step:0 > nsysmap:phase:forward > nsysmap:fwd:GPT2LMHeadModel: > "
        "nsysmap:fwd:GPT2Block:transformer.h.0 > nsysmap:fwd:Conv1D:transformer.h.0.attn.c_attn"
    )
    assert _row(ops, ids["fwd_block"])["module"] == "transformer.h.0"
    assert _row(ops, ids["loss"])["phase"] == "loss"
    assert _row(ops, ids["loss"])["category"] == "softmax"
    bwd = _row(ops, ids["bwd_gemm"])
    assert (bwd["tid"], bwd["step"], bwd["phase"], bwd["module"], bwd["direction"]) == (
        AUTOGRAD,
        0,
        "backward",
        "transformer.h.0.attn.c_attn",
        "backward",
    )
    assert bwd["attribution"] == "range"  # own thread has a range; phase came from the window
    outside = _row(ops, ids["bwd_outside_module"])
    assert (outside["attribution"], outside["phase"], outside["module"]) == (
        "other_thread",
        "backward",
        None,
    )
    # No range on its own thread: credited to the phase range that gave it its phase.
    assert outside["range_path"] == "nsysmap:step:0 > nsysmap:phase:backward"
    assert outside["range_depth"] == 2
    opt = _row(ops, ids["optimizer"])
    assert (opt["phase"], opt["module"], opt["category"]) == ("optimizer", None, "optimizer")
    assert _row(ops, ids["after_step"])["attribution"] == "no_range"
    lost = _row(ops, ids["no_launch"])
    assert (lost["attribution"], lost["tid"], lost["category"]) == (
        "no_launch",
        None,
        "communication",
    )
    copy = _row(ops, ids["memcpy"])
    assert (copy["category"], copy["phase"]) == ("memcpy", "data")


def test_every_op_once_and_time_conserved_per_device():
    f, _ = _training_step()
    f.kernel(MAIN, 13, "on_device_1", device=1, dur=3)
    report = f.profile()
    ops = attribute(report)
    assert sorted(ops["op_id"]) == sorted(report.ops["op_id"])

    def by_dev(df: pl.DataFrame) -> dict:
        return dict(df.group_by("device_id").agg(pl.col("dur_ns").sum()).iter_rows())

    assert by_dev(ops) == by_dev(report.ops) == {0: 9 * MS, 1: 3 * MS}


def test_launch_rows_are_matched_within_their_process():
    f = Frames()
    f.range(MAIN, "nsysmap:phase:forward", 0, 10, pid=1)
    f.range(MAIN, "nsysmap:phase:backward", 0, 10, pid=2)
    a = f.kernel(MAIN, 5, pid=1)
    b = f.kernel(MAIN, 5, pid=2)
    f.ops[b]["correlation_id"] = f.ops[a]["correlation_id"]
    f.calls[b]["correlation_id"] = f.calls[a]["correlation_id"]
    f.calls.append(dict(f.calls[a]))  # a copy of the launch row
    ops = attribute(f.profile())
    assert ops.height == 2
    assert _row(ops, a)["phase"] == "forward" and _row(ops, b)["phase"] == "backward"
    assert _row(ops, a)["launch_start_ns"] == 5 * MS


def test_loss_inside_forward_is_the_loss_phase():
    f = Frames()
    f.range(MAIN, "nsysmap:phase:forward", 0, 50)
    f.range(MAIN, "nsysmap:fwd:GPT2LMHeadModel:", 0, 50)
    f.range(MAIN, "nsysmap:phase:loss", 40, 49)
    k = f.kernel(MAIN, 45, "cross_entropy_kernel")
    row = _row(attribute(f.profile()), k)
    assert (row["phase"], row["module"]) == ("loss", "")


def test_emit_nvtx_backward_op_takes_the_module_of_its_forward_seq():
    f = Frames()
    f.range(MAIN, "nsysmap:fwd:Linear:mlp.fc", 0, 10)
    f.range(MAIN, "aten::addmm, seq = 7, op_id = 3, sizes = [[8, 16], [16, 32]]", 1, 9)
    f.range(AUTOGRAD, "autograd::engine::evaluate_function: AddmmBackward0", 20, 30)
    f.range(AUTOGRAD, "aten::mm, stashed seq = 7, op_id = 40", 21, 29)
    fwd = f.kernel(MAIN, 2, "sm90_xmma_gemm")
    bwd = f.kernel(AUTOGRAD, 22, "sm90_xmma_gemm")
    ops = attribute(f.profile())
    assert _row(ops, fwd)["aten_op"] == "aten::addmm"
    assert _row(ops, fwd)["input_shapes"] == "[[8, 16], [16, 32]]"
    row = _row(ops, bwd)
    assert (row["module"], row["module_class"], row["direction"], row["aten_op"]) == (
        "mlp.fc",
        "Linear",
        "backward",
        "aten::mm",
    )


def test_fsdp_hook_ranges_become_block_spans():
    f = Frames()
    f.range(MAIN, "FSDP::pre_forward (blocks.3._checkpoint_wrapped_module), op_id = 1", 0, 2)
    f.range(MAIN, "FSDP::post_forward (blocks.3._checkpoint_wrapped_module), op_id = 9", 30, 32)
    inside = f.kernel(MAIN, 10, "flash_fwd_kernel")
    outside = f.kernel(MAIN, 40, "flash_fwd_kernel")
    ops = attribute(f.profile())
    assert _row(ops, inside)["module"] == "blocks.3._checkpoint_wrapped_module"
    assert _row(ops, inside)["direction"] == "forward"
    assert _row(ops, inside)["category"] == "attention"
    assert _row(ops, outside)["module"] is None


def test_foreign_phase_and_step_names():
    f = Frames()
    f.range(MAIN, "ProfilerStep#4", 0, 100)
    f.range(MAIN, "Optimizer.step#AdamW.step", 80, 90)
    f.range(MAIN, "forward", 0, 30)
    a = f.kernel(MAIN, 85)
    b = f.kernel(MAIN, 10)
    ops = attribute(f.profile())
    assert (_row(ops, a)["step"], _row(ops, a)["phase"]) == (4, "optimizer")
    assert _row(ops, b)["phase"] == "forward"


NAMES = (
    "nsysmap:step:{i}",
    "nsysmap:phase:forward",
    "nsysmap:phase:backward",
    "nsysmap:fwd:Conv1D:h.{i}.c_fc",
    "nsysmap:bwd:Conv1D:h.{i}.c_fc",
    "aten::mm",
    "user range",
    "Warm-up Step {i}",
    "## forward ##",
    "ProfilerStep#{i}",
)


@pytest.mark.slow  # a property test against the reference: seconds
@settings(max_examples=120, deadline=None)
@given(
    st.data(),
    st.lists(
        st.tuples(st.sampled_from([None, 1, 2, 3]), st.integers(-2, 62), st.integers(0, 1)),
        max_size=30,
    ),
)
def test_matches_reference_on_random_reports(data, kernels):
    f = Frames()
    for tid in (1, 2):
        for start, end in data.draw(forest()):
            name = data.draw(st.sampled_from(NAMES)).format(i=data.draw(st.integers(0, 3)))
            f.range(tid, name, start, end)
    for tid, launch_at, device in kernels:
        f.kernel(tid, launch_at, device=device)
    report = f.profile()
    ops = attribute(report)
    expected = reference_attribution(report.ops, report.api_calls, report.ranges)
    assert ops.height == report.ops.height
    for row in ops.iter_rows(named=True):
        want = expected[row["op_id"]]
        got = {k: row[k] for k in want} | range_given(row)
        assert got == want, row


def test_forward_seq_candidates_are_the_names_with_a_wanted_forward_seq():
    """`_maybe_forward_seq` keeps every name holding a wanted `seq = N` as a forward
    field (a superset: `seq = 1` also matches `seq = 12`), never a stashed one."""
    from nsysmap.attribution.locate import _maybe_forward_seq

    names = pl.Series(
        [
            "aten::mm, seq = 12, op_id = 3",  # wanted
            "aten::mm, stashed seq = 12, op_id = 4",  # backward: never
            "seq = 7",  # a name that starts with the field
            "aten::add, seq = 9",  # not wanted, not a prefix of a wanted one
            "aten::add, seq = 123",  # `seq = 12` is a prefix: kept, parsed later
            "aten::relu, seq = 007",  # leading zeros: kept
            None,
            "nsysmap:fwd:Block:h.0",
            "aten::mm, sequence = 12",  # not the field
        ]
    )
    got = _maybe_forward_seq(names, pl.Series([12, 7])).to_list()
    assert got == [0, 2, 4, 5]


def test_scope_labels_are_those_of_each_range_name():
    """`Scope.labels` at a range that may give a scope: the labels of its own name
    (names repeat; their labels are kept once); null at a null position."""
    from nsysmap.attribution.labels import name_labels
    from nsysmap.attribution.scope import Scope, thread_keys

    f = Frames()
    names = ["nsysmap:step:1", "nsysmap:phase:forward", "nsysmap:fwd:Block:h.0", "aten::mm"]
    for step in range(2):
        for depth, name in enumerate(names):
            f.range(1, name.replace(":1", f":{step + 1}"), 100 * step + depth, 100 * step + 90)
    f.kernel(1, 5)
    report = f.profile()
    ranges = report.ranges
    keys = thread_keys(ranges, ranges.select("pid", "tid"))
    assert keys is not None
    scope = Scope.of(ranges, keys[0])
    columns = ["lbl_step", "lbl_phase", "lbl_module"]
    scoped = pl.Series([0, 1, 2, 4, 5, 6, None], dtype=pl.UInt32)  # not the aten::mm ranges
    got = pl.DataFrame(scope.labels(scoped, columns))
    expected = name_labels(ranges["name"].gather(scoped), columns)
    assert got.equals(expected)
    assert got["lbl_step"].to_list() == [1, None, None, 2, None, None, None]


def test_the_ranges_parents_are_converted_once_however_many_chunks(monkeypatch):
    """Each chunk of operations asks for the ranges' parent positions (its range
    paths): they are made once per profile, not once per chunk (at 10^7 kernels,
    41 chunks each converting 2.9·10^7 parents cost 13 CPU s)."""
    from nsysmap.attribution.attribute import attribute_chunks
    from nsysmap.intervals.preorder import Preorder

    f = Frames()
    for step in range(3):
        f.range(1, f"nsysmap:step:{step}", 100 * step, 100 * step + 90)
        f.range(1, "nsysmap:fwd:Block:h.0", 100 * step + 1, 100 * step + 80)
        for k in range(3):  # 9 operations, 6 ranges
            f.kernel(1, 100 * step + 10 + 20 * k)
    profile = f.profile()
    whole: list[int] = []
    original = Preorder.rows

    def counted(self: Preorder, found):
        if found.size == self.n:  # every range's: the parents (or a family of all ranges)
            whole.append(found.size)
        return original(self, found)

    monkeypatch.setattr(Preorder, "rows", counted)
    chunks = list(attribute_chunks(profile, chunk_rows=1))
    assert len(chunks) == profile.ops.height == 9
    assert len(whole) == 1
    assert pl.concat(chunks)["range_path"].drop_nulls().len() == 9


def test_work_on_a_thread_without_phase_ranges_takes_the_range_that_started_last():
    """Phase ranges of two threads cross; work launched from a third thread takes, of the
    ranges open at its launch, the one that started last, and the crossing one stays
    open to its own end (it is not clipped to the range it crossed)."""
    f = Frames()
    f.range(1, "nsysmap:phase:forward", 0, 10)
    f.range(2, "nsysmap:phase:backward", 5, 15)
    f.range(4, "nsysmap:phase:loss", 20, 30)  # started together: the one that ends first
    f.range(5, "nsysmap:phase:optimizer", 20, 25)
    at = {3: "forward", 7: "backward", 12: "backward", 16: None, 22: "optimizer", 27: "loss"}
    for launch in at:
        f.kernel(3, launch)
    ops = attribute(f.profile()).sort("op_id")
    assert dict(zip(at, ops["phase"], strict=True)) == at
    credited = ops.filter(pl.col("phase").is_not_null())
    assert (credited["attribution"] == "other_thread").all()
    assert credited["other_thread_range_id"].to_list() == [0, 1, 1, 3, 2]


def test_a_backward_nodes_own_range_takes_the_module_of_its_forward_seq():
    """Recent PyTorch's emit_nvtx names the node `AddmmBackward0, seq = 7` (the number of
    the forward op that made it) and writes no `stashed seq`: the node's kernels take the
    module of forward op 7, not of a node read as a forward op with that number."""
    f = Frames()
    f.range(MAIN, "nsysmap:fwd:Linear:mlp.fc", 0, 10)
    f.range(MAIN, "aten::addmm, seq = 7, op_id = 3, sizes = [[8, 16], [16, 32]]", 1, 9)
    f.range(AUTOGRAD, "autograd::engine::evaluate_function: AddmmBackward0, op_id = 39", 20, 30)
    f.range(AUTOGRAD, "AddmmBackward0, seq = 7, op_id = 40, sizes = [[8, 32]]", 21, 29)
    f.range(AUTOGRAD, "aten::mm, op_id = 41", 22, 28)
    bwd = f.kernel(AUTOGRAD, 23, "sm90_xmma_gemm")
    row = _row(attribute(f.profile()), bwd)
    assert (row["module"], row["module_class"], row["direction"]) == (
        "mlp.fc",
        "Linear",
        "backward",
    )
