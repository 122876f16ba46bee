"""FLOP rules per aten operator, for instrument/flops/.

Two numbers per operator call:

* `matmul` FLOPs, exact: the formulas of `torch.utils.flop_counter` (the ones
  `FlopCounterMode` uses: 2·m·k·n for mm/addmm/bmm/baddbmm, convolutions,
  scaled-dot-product attention), plus the CPU flash-attention operators that
  registry lacks. Attention is split into its matmuls (`part`): forward
  `scores` (Q·Kᵀ) and `values` (P·V); backward `recompute_scores`,
  `grad_probs` (dO·Vᵀ), `grad_values` (Pᵀ·dO), `grad_query` (dS·K) and
  `grad_key` (dSᵀ·Q).
* `other` FLOPs, an estimate from element counts and a fixed factor per
  operator kind (`ESTIMATES` in instrument/flops/estimates.py, shared with
  nsysmap/flops/aten_flops.py; documented in docs/flops.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import flop_counter

from instrument.flops.estimates import ESTIMATES, OUT

aten = torch.ops.aten

# Fused attention operators: (query, key, value) come first in the forward;
# (grad_out, query, key, value) in the backward.
SDPA_FORWARD = {
    aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_cudnn_attention,
    aten._scaled_dot_product_flash_attention_for_cpu,
}
SDPA_BACKWARD = {
    aten._scaled_dot_product_efficient_attention_backward,
    aten._scaled_dot_product_flash_attention_backward,
    aten._scaled_dot_product_cudnn_attention_backward,
    aten._scaled_dot_product_flash_attention_for_cpu_backward,
}
# Matmul-class operators whose first argument is an added term (bias).
_BIASED = {aten.addmm, aten.baddbmm, aten.addbmm}
_CONVOLUTIONS = {aten.convolution, aten._convolution}  # bias is the third argument

# Operators that move, copy, create or reinterpret data: no arithmetic.
MOVEMENT = {
    "aten::clone",
    "aten::_to_copy",
    "aten::copy_",
    "aten::contiguous",
    "aten::cat",
    "aten::stack",
    "aten::fill_",
    "aten::zero_",
    "aten::bernoulli_",
    "aten::scalar_tensor",
    "aten::lift_fresh",
    "aten::index_select",
    "aten::gather",
    "aten::_unsafe_view",
    "aten::tril",
    "aten::triu",
}


@dataclass(frozen=True)
class OpFlops:
    """What one operator call costs: matmul FLOPs per part, estimated other FLOPs."""

    kind: str
    parts: tuple[tuple[str, int], ...]
    other: int


def op_name(func: Any) -> str:
    """`aten::addmm` for aten.addmm.default (the profiler's spelling, no overload)."""
    return func._schema.name


def shapes_text(args: tuple[Any, ...]) -> str:
    """Positional arguments as the profiler writes them: `[[1024, 768], [768], []]`."""
    return json.dumps([_shape(a) for a in args])


def _shape(arg: Any) -> list[Any]:
    if isinstance(arg, torch.Tensor):
        return list(arg.shape)
    if isinstance(arg, (list, tuple)) and any(isinstance(a, torch.Tensor) for a in arg):
        return [_shape(a) for a in arg]
    return []


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple)):
        for item in value:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


def _numel(value: Any) -> int:
    tensor = _first_tensor(value)
    return 0 if tensor is None else tensor.numel()


def sdpa_forward_parts(q: Any, k: Any, v: Any) -> tuple[tuple[str, int], ...]:
    """Q·Kᵀ and P·V of one attention call, 2·b·h·s_q·s_k·d each (GQA: h = query heads)."""
    b, h, s_q, d = q.shape
    s_k, d_v = k.shape[2], v.shape[3]
    return (("scores", 2 * b * h * s_q * s_k * d), ("values", 2 * b * h * s_q * s_k * d_v))


def sdpa_backward_parts(q: Any, k: Any, v: Any) -> tuple[tuple[str, int], ...]:
    """The five matmuls `torch.utils.flop_counter` counts for an attention backward."""
    b, h, s_q, d = q.shape
    s_k, d_v = k.shape[2], v.shape[3]
    unit = 2 * b * h * s_q * s_k
    return (
        ("recompute_scores", unit * d),
        ("grad_probs", unit * d_v),
        ("grad_values", unit * d_v),
        ("grad_query", unit * d),
        ("grad_key", unit * d),
    )


def _sdpa_forward_formula(q: Any, k: Any, v: Any, *args: Any, **kwargs: Any) -> int:
    return sum(flop for _, flop in sdpa_forward_parts(q, k, v))


def _sdpa_backward_formula(g: Any, q: Any, k: Any, v: Any, *args: Any, **kwargs: Any) -> int:
    return sum(flop for _, flop in sdpa_backward_parts(q, k, v))


# Raw formulas (called with tensors) that `FlopCounterMode(custom_mapping=...)`
# needs for the CPU flash-attention operators it does not know.
def _raw(formula: Callable[..., int]) -> Callable[..., int]:
    def wrapper(*args: Any, out_val: Any = None, **kwargs: Any) -> int:
        return formula(*args, **kwargs)

    wrapper._get_raw = True  # type: ignore[attr-defined]
    return wrapper


EXTRA_FORMULAS: dict[Any, Callable[..., int]] = {
    aten._scaled_dot_product_flash_attention_for_cpu: _raw(_sdpa_forward_formula),
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _raw(_sdpa_backward_formula),
}


def op_flops(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> OpFlops:
    """Matmul FLOPs (exact) and other FLOPs (estimate) of one operator call."""
    packet = func.overloadpacket
    if packet in SDPA_FORWARD:
        return OpFlops("attention", sdpa_forward_parts(*args[:3]), 0)
    if packet in SDPA_BACKWARD:
        return OpFlops("attention", sdpa_backward_parts(*args[1:4]), 0)
    formula = flop_counter.flop_registry.get(packet)
    if formula is not None:
        flop = formula(*args, **kwargs, out_val=out)
        biased = packet in _BIASED or (
            packet in _CONVOLUTIONS and isinstance(args[2], torch.Tensor)
        )
        kind = "attention" if "attention" in str(packet) else "matmul"
        return OpFlops(kind, (("", flop),), _numel(out) if biased else 0)
    kind, other = estimate(func, args, out)
    return OpFlops(kind, (("", 0),), other)


def estimate(func: Any, args: tuple[Any, ...], out: Any) -> tuple[str, int]:
    """(kind, estimated FLOPs) of an operator that is not matmul-class."""
    name = op_name(func)
    rule = ESTIMATES.get(name)
    if rule is not None:
        kind, factor, index = rule
        return kind, factor * _numel(out if index == OUT else args[index : index + 1])
    schema = func._schema
    returns_alias = bool(schema.returns) and schema.returns[0].alias_info is not None
    is_view = returns_alias and not schema.returns[0].alias_info.is_write
    creates = name.endswith("_like") or name.startswith("aten::new_")
    if name in MOVEMENT or is_view or creates or _first_tensor(args) is None:
        return "movement", 0
    if torch.Tag.pointwise in func.tags:
        return "pointwise", _numel(out)
    if torch.Tag.reduction in func.tags:
        return "reduction", _numel(args[:1])
    return "uncounted", 0
