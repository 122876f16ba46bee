"""The estimated FLOPs per element of non-matmul operators: one table for both sides.

instrument/flops/ops.py counts with it on fake tensors inside training;
nsysmap/flops/aten_flops.py counts with it from recorded input shapes after
training. It imports neither torch nor polars (importing `instrument.flops`
does not import torch either). The factors are documented in docs/flops.md.
"""

from __future__ import annotations

OUT = -1  # "whose elements": the (first) output's
# name -> (kind, FLOPs per element, whose elements: index of the positional
# argument, or OUT for the (first) output).
ESTIMATES: dict[str, tuple[str, int, int]] = {
    "aten::_softmax": ("softmax", 5, 0),  # max, subtract, exp, sum, divide
    "aten::_safe_softmax": ("softmax", 5, 0),
    "aten::_log_softmax": ("softmax", 5, 0),
    "aten::_softmax_backward_data": ("softmax", 4, 0),  # y·(g − Σ g·y)
    "aten::_log_softmax_backward_data": ("softmax", 4, 0),
    "aten::native_layer_norm": ("norm", 7, 0),  # mean, centre, square, sum, scale, affine
    "aten::native_layer_norm_backward": ("norm", 12, 0),
    "aten::_fused_rms_norm": ("norm", 5, 0),
    "aten::native_batch_norm": ("norm", 7, 0),
    "aten::native_batch_norm_backward": ("norm", 12, 0),
    "aten::native_group_norm": ("norm", 7, 0),
    "aten::native_group_norm_backward": ("norm", 12, 0),
    "aten::gelu": ("pointwise", 8, OUT),  # tanh approximation: ~8 operations
    "aten::gelu_backward": ("pointwise", 12, OUT),
    "aten::native_dropout": ("dropout", 2, OUT),  # compare with the mask, scale
    "aten::native_dropout_backward": ("dropout", 1, OUT),
    "aten::nll_loss_forward": ("loss", 1, 1),  # per target
    "aten::nll_loss_backward": ("loss", 1, 2),
    "aten::embedding_dense_backward": ("embedding", 1, 0),  # scatter-add
    "aten::embedding": ("embedding", 0, OUT),  # a gather
}
