"""FLOPs of aten operators from their recorded input shapes (no torch).

`input_shapes` of ops.parquet holds the shapes PyTorch recorded for an
operator's positional inputs, `[]` for a non-tensor: torch.profiler's "Input
Dims" on the CPU backend, the `sizes = [[...], ...]` field of `emit_nvtx(
record_shapes=True)` / `nsys --pytorch=autograd-shapes-nvtx` ranges on nsys
reports (and only that field: `input_op_ids`, `op_id` and `seq` differ from
call to call and are never part of the shapes; nsysmap.attribution.labels):

    aten::addmm  [[2304], [1024, 768], [768, 2304], [], []]  ->  2·1024·768·2304 matmul
                                                                 + 1024·2304 bias adds

**Exact** (`matmul_flop`, 2·m·k·n per matmul, the formulas of
`torch.utils.flop_counter` that instrument/flops/ops.py uses): `mm`, `addmm`,
`bmm`, `baddbmm`, `addbmm`, `matmul`, `linear`, and the fused attention
operators (forward: Q·Kᵀ and P·V; backward: five matmuls, of which the
recomputed scores are also reported as `recompute_flop`). **Estimated**
(`other_flop_estimate`): elements × the factors of `ESTIMATES`
(instrument/flops/estimates.py, the table instrument/flops/ops.py uses too), one
per output element for pointwise operators, one per input element for
reductions, the bias term of addmm/baddbmm/addbmm/linear. Anything else
(convolutions included: their output size needs strides the shapes lack)
counts 0 and is listed as `uncounted`.

Every operation is counted once. On nsys reports several kernels can share
one operator range (cuBLAS with a split-K reduction): the operator's FLOPs go
to the first of them. The kernel's innermost operator range is the one that
launched it, so `aten::linear` around `aten::addmm` is never counted twice.
On the CPU backend each row is one operator call with its self time; the
composite operators that call recorded children (`aten::linear`,
`aten::matmul`, ...) are skipped there, their children are counted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import polars as pl

from instrument.flops.estimates import ESTIMATES, OUT
from nsysmap.attribution.labels import ATEN_OP

_POINTWISE_NAMES = (
    "add sub mul div neg exp log pow sqrt rsqrt tanh tanh_backward sigmoid sigmoid_backward "
    "relu threshold_backward silu silu_backward where masked_fill addcmul addcdiv lerp clamp "
    "clamp_min maximum minimum abs erf reciprocal ge gt lt le eq ne "
    "add_ sub_ mul_ div_ addcmul_ addcdiv_ lerp_ sqrt_ exp_"
)
_REDUCTION_NAMES = "sum mean amax amin var std norm linalg_vector_norm prod any all argmax argmin"
POINTWISE = frozenset(f"aten::{n}" for n in _POINTWISE_NAMES.split())  # 1 per output element
REDUCTIONS = frozenset(f"aten::{n}" for n in (_REDUCTION_NAMES + " logsumexp").split())
# Fused attention: name -> (layout of q/k/v, index of q, backward?).
# "bhsd" = [batch, heads, seq, dim] (the sdpa operators), "bshd" = [batch, seq, heads, dim].
ATTENTION: dict[str, tuple[str, int, bool]] = {
    "aten::scaled_dot_product_attention": ("bhsd", 0, False),
    "aten::_scaled_dot_product_flash_attention": ("bhsd", 0, False),
    "aten::_scaled_dot_product_efficient_attention": ("bhsd", 0, False),
    "aten::_scaled_dot_product_cudnn_attention": ("bhsd", 0, False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": ("bhsd", 0, False),
    "aten::_flash_attention_forward": ("bshd", 0, False),
    "aten::_efficient_attention_forward": ("bshd", 0, False),
    "aten::_scaled_dot_product_flash_attention_backward": ("bhsd", 1, True),
    "aten::_scaled_dot_product_efficient_attention_backward": ("bhsd", 1, True),
    "aten::_scaled_dot_product_cudnn_attention_backward": ("bhsd", 1, True),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": ("bhsd", 1, True),
    "aten::_flash_attention_backward": ("bshd", 1, True),
    "aten::_efficient_attention_backward": ("bshd", 1, True),
}
MATMUL_OPS = frozenset(
    {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm"}
    | {"aten::matmul", "aten::linear"}
)
# Composites whose children are recorded as rows of their own on the CPU backend.
_COMPOSITE_NAMES = (
    "matmul linear einsum scaled_dot_product_attention softmax log_softmax layer_norm "
    "dropout cross_entropy_loss nll_loss nll_loss_nd"
)
CPU_COMPOSITES = frozenset(f"aten::{n}" for n in _COMPOSITE_NAMES.split())
COUNTED = MATMUL_OPS | set(ATTENTION) | set(ESTIMATES) | POINTWISE | REDUCTIONS

# Columns `with_shape_flops` adds; the FLOP columns are null where no shapes were recorded.
FLOP_COLUMNS = pl.Schema(
    {
        "flop_kind": pl.String,  # matmul, attention, softmax, norm, pointwise, ..., uncounted
        "matmul_flop": pl.Int64,
        "recompute_flop": pl.Int64,  # part of matmul_flop: attention scores recomputed
        "other_flop_estimate": pl.Int64,
    }
)
Flops = tuple[str, int, int, int]  # kind, matmul, recompute, other


def parse_shapes(text: str | None) -> list[Any] | None:
    """`"[[8, 128], [], [[2], [3]]]"` -> a list; None when absent or unreadable."""
    if text is None:
        return None
    try:
        shapes = json.loads(text)
    except ValueError:
        return None
    return shapes if isinstance(shapes, list) else None


def _dims(shape: Any) -> list[int] | None:
    """A tensor's sizes, or None for a non-tensor / tensor list."""
    if isinstance(shape, list) and shape and all(isinstance(d, int) for d in shape):
        return shape
    return None


def _numel(shape: Any) -> int:
    dims = _dims(shape)
    return math.prod(dims) if dims is not None else (1 if shape == [] else 0)


def _broadcast_numel(shapes: Sequence[Any]) -> int:
    """Elements of the broadcast of every plain tensor input (trailing dims aligned)."""
    tensors = [s for s in shapes if _dims(s) is not None]
    if not tensors:
        return 1
    rank = max(len(s) for s in tensors)
    padded = [[1] * (rank - len(s)) + s for s in tensors]
    return math.prod(max(column) for column in zip(*padded, strict=True))


def _tensor_args(shapes: list[Any], start: int, count: int) -> list[list[int] | None]:
    """Sizes of `count` inputs from `start` (None: absent or not a plain tensor)."""
    return [_dims(shapes[i]) if i < len(shapes) else None for i in range(start, start + count)]


def _matmul(op: str, shapes: list[Any]) -> Flops | None:
    """2·m·k·n (batched: ·b) plus the added term of addmm/baddbmm/addbmm/linear."""
    args = shapes[1:3] if op in ("aten::addmm", "aten::baddbmm", "aten::addbmm") else shapes[:2]
    a, b = _tensor_args(args, 0, 2)
    if a is None or b is None:
        return None
    if op == "aten::linear":  # input [..., k] · weight[n, k]ᵀ
        rows, k, n = math.prod(a[:-1]), a[-1], b[0]
        bias = _dims(shapes[2]) is not None if len(shapes) > 2 else False
        return ("matmul", 2 * rows * k * n, 0, rows * n if bias else 0)
    a2, b2 = ([1, *a] if len(a) == 1 else a), ([*b, 1] if len(b) == 1 else b)
    m, k, n = a2[-2], a2[-1], b2[-1]
    batch = _broadcast_numel([a2[:-2] or [1], b2[:-2] or [1]])
    flop = 2 * batch * m * k * n
    added = {"aten::addmm": m * n, "aten::baddbmm": batch * m * n, "aten::addbmm": m * n}
    return ("matmul", flop, 0, added.get(op, 0))


def _attention(op: str, shapes: list[Any]) -> Flops | None:
    """Q·Kᵀ and P·V forward; backward also recomputes Q·Kᵀ (docs/flops.md)."""
    layout, first, backward = ATTENTION[op]
    q, k, v = _tensor_args(shapes, first, 3)
    if q is None or k is None or v is None or not len(q) == len(k) == len(v) == 4:
        return None
    if layout == "bhsd":
        (b, h, s_q, d), s_k = q, k[2]
    else:
        (b, s_q, h, d), s_k = q, k[1]
    unit, d_v = 2 * b * h * s_q * s_k, v[3]
    if not backward:
        return ("attention", unit * (d + d_v), 0, 0)
    return ("attention", unit * (3 * d + 2 * d_v), unit * d, 0)


def flop_factor(op: str) -> int:
    """The FLOPs per element an operator is counted with (its estimate; 1 for pointwise
    operators and reductions; 0: not counted, matmuls aside)."""
    rule = ESTIMATES.get(op)
    if rule is not None:
        return rule[1]
    return 1 if op in POINTWISE or op in REDUCTIONS else 0


def signature_flops(op: str | None, shapes_text: str | None) -> Flops | None:
    """(kind, matmul, recompute, other estimate) of one call; None without shapes."""
    shapes = parse_shapes(shapes_text)
    if op is None or shapes is None:
        return None
    if op in MATMUL_OPS:
        return _matmul(op, shapes) or ("uncounted", 0, 0, 0)
    if op in ATTENTION:
        return _attention(op, shapes) or ("uncounted", 0, 0, 0)
    rule = ESTIMATES.get(op)
    if rule is not None:
        kind, factor, index = rule
        if index == OUT:
            return (kind, 0, 0, factor * _broadcast_numel(shapes))
        arg = shapes[index] if index < len(shapes) else None
        return (kind, 0, 0, factor * _numel(arg) if arg is not None else 0)
    if op in POINTWISE:
        return ("pointwise", 0, 0, _broadcast_numel(shapes))
    if op in REDUCTIONS:
        return ("reduction", 0, 0, _numel(shapes[0]) if shapes else 0)
    return ("uncounted", 0, 0, 0)


def signature_table(signatures: pl.DataFrame) -> pl.DataFrame:
    """FLOP_COLUMNS for distinct (aten_op, input_shapes) pairs (a loop over signatures)."""
    rows = [
        signature_flops(op, shapes) or (None, None, None, None)
        for op, shapes in signatures.select("aten_op", "input_shapes").iter_rows()
    ]
    flops = pl.DataFrame(rows, schema=FLOP_COLUMNS, orient="row")
    return pl.concat([signatures.select("aten_op", "input_shapes"), flops], how="horizontal")


def with_shape_flops(ops: pl.DataFrame) -> pl.DataFrame:
    """`ops` (the OPS table) with FLOP_COLUMNS and `op_call` added.

    `op_call` is true on the one row that stands for an operator call (every
    CPU-backend row; the first kernel of an operator range instance on nsys).
    FLOPs are counted on those rows only (CPU composites excepted), 0 elsewhere.
    """
    signatures = (
        ops.select("aten_op", "input_shapes").unique().filter(pl.col("input_shapes").is_not_null())
    )
    table = signature_table(signatures)
    out = ops.join(table, on=["aten_op", "input_shapes"], how="left", nulls_equal=False)
    out = out.with_columns(_first_of_call().alias("op_call"))
    composite = (pl.col("kind") == "cpu_op") & pl.col("aten_op").is_in(list(CPU_COMPOSITES))
    counted = pl.col("op_call") & ~composite.fill_null(False)
    return out.with_columns(
        pl.when(pl.col("flop_kind").is_null())
        .then(pl.lit(None, pl.Int64))
        .when(counted)
        .then(pl.col(c))
        .otherwise(pl.lit(0, pl.Int64))
        .alias(c)
        for c in ("matmul_flop", "recompute_flop", "other_flop_estimate")
    )


def _first_of_call() -> pl.Expr:
    """True on the one row that stands for an operator call; false for rows without an operator.

    GPU: of the operations launched inside one instance of the innermost
    operator range (`range_id`, when that range is the operator's own;
    otherwise every operation is its own call), the longest kernel (the
    longest copy or set only when the call launched no kernel; ties: the
    lowest op_id). So a call's FLOPs land on its gemm, not on the memset that
    cuBLAS launched before it. CPU backend: every row.
    """
    cpu = pl.col("kind") == "cpu_op"
    own_range = pl.col("range_name").str.extract(ATEN_OP, 1) == pl.col("aten_op")
    instance = pl.when(~cpu & own_range.fill_null(False)).then(pl.col("range_id"))
    rank = pl.struct(
        (pl.col("kind") == "kernel").alias("k"), pl.col("dur_ns").fill_null(0), -pl.col("op_id")
    )
    chosen = pl.col("op_id").sort_by(rank, descending=True).first()
    first = pl.col("op_id") == chosen.over("pid", instance.alias("_instance"))
    return (
        pl.when(pl.col("aten_op").is_null())
        .then(pl.lit(False))
        .when(cpu | instance.is_null())
        .then(pl.lit(True))
        .otherwise(first)
    )
