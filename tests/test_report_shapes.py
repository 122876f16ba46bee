"""FLOPs from recorded input shapes: hand-made shapes, agreement with instrument/, nsys nesting."""

from __future__ import annotations

import polars as pl
import pytest

from devtools.synth import SynthExport
from nsysmap.flops import aten_flops as sf
from nsysmap.flow.verbs import analyse_file
from nsysmap.report.operator_shapes import asked_shapes, shapes_table


@pytest.mark.parametrize(
    ("op", "shapes", "expected"),
    [
        ("aten::mm", "[[4, 6], [6, 5]]", ("matmul", 2 * 4 * 6 * 5, 0, 0)),
        ("aten::addmm", "[[5], [4, 6], [6, 5], [], []]", ("matmul", 240, 0, 4 * 5)),
        ("aten::bmm", "[[3, 4, 6], [3, 6, 5]]", ("matmul", 3 * 240, 0, 0)),
        ("aten::baddbmm", "[[3, 4, 5], [3, 4, 6], [3, 6, 5], [], []]", ("matmul", 720, 0, 60)),
        ("aten::addbmm", "[[4, 5], [3, 4, 6], [3, 6, 5], [], []]", ("matmul", 720, 0, 20)),
        # batch dims broadcast: [2, 1] with [3] -> 6 matmuls of 4x6 by 6x5
        ("aten::matmul", "[[2, 1, 4, 6], [3, 6, 5]]", ("matmul", 6 * 240, 0, 0)),
        ("aten::matmul", "[[6], [6, 5]]", ("matmul", 2 * 6 * 5, 0, 0)),
        ("aten::linear", "[[2, 3, 6], [5, 6], [5]]", ("matmul", 2 * 6 * 6 * 5, 0, 6 * 5)),
        ("aten::linear", "[[2, 3, 6], [5, 6], []]", ("matmul", 2 * 6 * 6 * 5, 0, 0)),
        ("aten::_softmax", "[[8, 12, 128, 128], [], []]", ("softmax", 0, 0, 5 * 8 * 12 * 128**2)),
        ("aten::_softmax_backward_data", "[[2, 3], [2, 3], [], []]", ("softmax", 0, 0, 24)),
        (
            "aten::native_layer_norm",
            "[[8, 128, 768], [], [768], [768], []]",
            ("norm", 0, 0, 7 * 8 * 128 * 768),
        ),
        ("aten::gelu", "[[2, 3], []]", ("pointwise", 0, 0, 8 * 6)),
        ("aten::add", "[[8, 1, 4], [3, 1], []]", ("pointwise", 0, 0, 8 * 3 * 4)),
        ("aten::add_", "[[], [], []]", ("pointwise", 0, 0, 1)),
        ("aten::sum", "[[10, 7], [], [], []]", ("reduction", 0, 0, 70)),
        ("aten::nll_loss_forward", "[[1024, 50], [1024], [], [], []]", ("loss", 0, 0, 1024)),
        ("aten::embedding", "[[50, 8], [4, 16], [], [], []]", ("embedding", 0, 0, 0)),
        ("aten::cat", "[[[2, 3], [2, 3]], []]", ("uncounted", 0, 0, 0)),
        ("aten::cudnn_convolution", "[[1, 3, 8, 8], [4, 3, 3, 3]]", ("uncounted", 0, 0, 0)),
        ("aten::mm", "[[4, 6], []]", ("uncounted", 0, 0, 0)),
    ],
)
def test_flops_of_hand_made_shapes(op, shapes, expected):
    assert sf.signature_flops(op, shapes) == expected


def test_attention_counts_two_matmuls_forward_and_five_backward_in_both_layouts():
    # q [b=2, h=4, s_q=8, d=16]; k, v with 2 kv heads (GQA), s_k=10, d_v=32
    q, k, v = [2, 4, 8, 16], [2, 2, 10, 16], [2, 2, 10, 32]
    unit = 2 * 2 * 4 * 8 * 10
    fwd = sf.signature_flops("aten::_scaled_dot_product_flash_attention", str([q, k, v, [], []]))
    assert fwd == ("attention", unit * (16 + 32), 0, 0)
    bwd = sf.signature_flops(
        "aten::_scaled_dot_product_flash_attention_backward", str([q, q, k, v, [], []])
    )
    assert bwd == ("attention", unit * (3 * 16 + 2 * 32), unit * 16, 0)
    # the flash kernels' own operators take [batch, seq, heads, dim]
    bshd = [[2, 8, 4, 16], [2, 10, 2, 16], [2, 10, 2, 32]]
    assert sf.signature_flops("aten::_flash_attention_forward", str(bshd)) == fwd
    assert sf.signature_flops("aten::_efficient_attention_backward", str([bshd[0], *bshd])) == bwd


def test_without_shapes_there_is_nothing_to_count():
    assert sf.signature_flops("aten::mm", None) is None
    assert sf.signature_flops("aten::mm", "not shapes") is None
    assert sf.signature_flops(None, "[[1, 2]]") is None


@pytest.mark.slow  # imports torch (instrument.flops.ops)
def test_the_estimate_table_is_instrument_s_table():
    """One table: the counter on fake tensors and the shapes reader use the same object."""
    flops_ops = pytest.importorskip("instrument.flops.ops")
    assert sf.OUT is flops_ops.OUT
    assert sf.ESTIMATES is flops_ops.ESTIMATES


@pytest.fixture(scope="module")
def gpt2_documents():
    flops = pytest.importorskip("instrument.flops")
    models = pytest.importorskip("instrument.flops.models")
    return [
        (attn, flops.count_flops(models.gpt2_factory("tiny", attn=attn), batch=2, seq=16))
        for attn in ("eager", "sdpa")
    ]


@pytest.mark.slow  # FLOP counting on fake tensors
def test_shape_flops_agree_with_instrument_on_every_row_they_both_count(gpt2_documents):
    """The FLOP document records each operator's shapes: nsysmap's count from those
    shapes must be the document's, for every operator both sides know."""
    for attn, doc in gpt2_documents:
        rows = pl.DataFrame(doc["rows"])
        known = rows.filter(pl.col("op").is_in(list(sf.COUNTED)))
        per_call = known.group_by("module", "direction", "op", "input_shapes", "calls").agg(
            pl.col("matmul_flop").sum(), pl.col("other_flop_estimate").sum()
        )
        assert per_call.height > 20
        for row in per_call.iter_rows(named=True):
            _, matmul, _, other = sf.signature_flops(row["op"], row["input_shapes"])
            assert (matmul * row["calls"], other * row["calls"]) == (
                row["matmul_flop"],
                row["other_flop_estimate"],
            ), row
        ops = set(per_call["op"])
        assert {"aten::addmm", "aten::native_layer_norm", "aten::tanh", "aten::add"} <= ops
        fused = "aten::_scaled_dot_product_flash_attention_for_cpu_backward"
        assert {"aten::bmm", "aten::_softmax"} <= ops if attn == "eager" else fused in ops


def _nsys_export_with_nested_aten_ranges(path):
    """emit_nvtx-style ranges: a linear around an addmm with two kernels (gemm + split-K
    reduction), a softmax, and a linear that launches its kernel itself.

        thread 1: [aten::linear [aten::addmm  k1 k2 ]] [aten::_softmax k3] [aten::linear k4]
    """
    b = SynthExport()
    b.thread(1, 1, "python")
    b.gpu(0)
    b.range(1, 1, 0, 10, "aten::linear, seq = 1, sizes = [[4, 6], [5, 6], [5]]")
    b.range(1, 1, 1, 9, "aten::addmm, seq = 2, sizes = [[5], [4, 6], [6, 5], [], []]")
    b.range(1, 1, 11, 15, "aten::_softmax, seq = 3, sizes = [[4, 5], [], []]")
    b.range(1, 1, 16, 20, "aten::linear, seq = 4, sizes = [[4, 6], [5, 6], []]")
    for corr, t, name in (
        (1, 2, "gemm_a"),
        (2, 4, "splitKreduce"),
        (3, 12, "softmax"),
        (4, 17, "gemm_b"),
    ):
        b.launch(1, 1, t, t + 1, corr)
        b.kernel(1, 0, 7, t + 30, t + 31, corr, name=name)
    b.write(path)
    return path


@pytest.mark.slow
def test_nsys_operator_ranges_count_each_call_once(tmp_path):
    export = _nsys_export_with_nested_aten_ranges(tmp_path / "aten.sqlite")
    ops = analyse_file(export, tmp_path / "out").ops
    counted = sf.with_shape_flops(ops).sort("op_id")
    assert counted["aten_op"].to_list() == ["aten::addmm"] * 2 + ["aten::_softmax", "aten::linear"]
    assert counted["op_call"].to_list() == [True, False, True, True]
    # addmm once (not again for the linear around it), the second kernel adds nothing
    assert counted["matmul_flop"].to_list() == [240, 0, 0, 240]
    assert counted["other_flop_estimate"].to_list() == [20, 0, 5 * 20, 0]
    shapes = shapes_table(counted)
    assert shapes.filter(pl.col("aten_op") == "aten::addmm")["calls"].to_list() == [1]
    asked = asked_shapes(shapes)
    assert set(asked["family"]) == {"addmm / linear", "softmax"}


@pytest.mark.slow
def test_a_calls_flops_land_on_its_longest_kernel_not_on_a_memset_before_it(tmp_path):
    """cuBLAS often clears a workspace before the gemm of one addmm:

    thread 1: [aten::addmm  memset(2 ms) gemm(5 ms) splitK(1 ms)]
    The call's FLOPs belong to the gemm's category, not to memset's.
    """
    b = SynthExport()
    b.thread(1, 1, "python")
    b.gpu(0)
    b.range(1, 1, 0, 10, "aten::addmm, seq = 2, sizes = [[5], [4, 6], [6, 5], [], []]")
    b.launch(1, 1, 1, 2, 1)
    b.memset(1, 0, 7, 30, 32, 1)
    b.launch(1, 1, 3, 4, 2)
    b.kernel(1, 0, 7, 33, 38, 2, name="gemm")
    b.launch(1, 1, 5, 6, 3)
    b.kernel(1, 0, 7, 39, 40, 3, name="splitKreduce")
    b.write(tmp_path / "memset.sqlite")
    ops = analyse_file(tmp_path / "memset.sqlite", tmp_path / "out").ops
    # op ids in launch order, as torch.profiler traces number them: the memset comes first
    ops = ops.sort("start_ns").with_columns(op_id=pl.int_range(pl.len(), dtype=pl.Int64))
    counted = sf.with_shape_flops(ops).sort("op_id")
    assert counted["kind"].to_list() == ["memset", "kernel", "kernel"]
    assert counted["op_call"].to_list() == [False, True, False]
    assert counted["matmul_flop"].to_list() == [0, 240, 0]


def test_asked_shapes_order_does_not_depend_on_the_order_of_its_input():
    # Two shapes of one operator with as many calls: their order comes from the shapes.
    shapes = pl.DataFrame(
        {
            "module": ["model.h.0.mlp", "model.h.0.mlp"],
            "module_class": ["MLP", "MLP"],
            "direction": ["forward", "forward"],
            "aten_op": ["aten::addmm", "aten::addmm"],
            "input_shapes": ["[[5], [4, 6], [6, 5], [], []]", "[[5], [2, 6], [6, 5], [], []]"],
            "calls": [3, 3],
            "flop_counted": [True, True],
            "matmul_flop_per_call": [240, 120],
            "other_flop_estimate_per_call": [20, 10],
        }
    )
    forward, backward = asked_shapes(shapes), asked_shapes(shapes.reverse())
    assert forward.equals(backward)
    assert forward["input_shapes"].to_list() == sorted(shapes["input_shapes"])
