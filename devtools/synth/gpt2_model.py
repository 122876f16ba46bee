"""GPT-2 as the synthetic exports run it: modules, operators, kernels, backward nodes.

`gpt2(n_layer)` is the module tree (Hugging Face's GPT2LMHeadModel layout:
Conv1D projections, flash attention through scaled_dot_product_attention,
NewGELU, dropout) and `LOSS` the cross-entropy operators; each operator lists
the PyTorch operator ranges it opens (outermost first), the kernels it
launches (keys of `devtools.synth.kernels.KERNELS`), its autograd node and
what that node runs in backward. `devtools.synth.gpt` walks it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Op:
    """One PyTorch operator call: its ranges (outermost first), kernels, and backward node."""

    chain: tuple[str, ...]
    kernels: tuple[str, ...] = ()
    sizes: str | None = None
    node: str | None = None  # autograd node; None: nothing runs in backward
    backward: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (aten op, its kernels)


@dataclass(frozen=True)
class Mod:
    """An nn.Module call; `hooks` False: no backward range (the hook does not fire)."""

    name: str
    cls: str
    items: tuple[Mod | Op, ...]
    hooks: bool = True


B, T, C = 8, 1024, 768
_X, _W3, _W4 = f"[{B}, {T}, {C}]", f"[{C}, {3 * C}]", f"[{C}, {4 * C}]"


def _view() -> Op:
    return Op(("aten::view",), (), f"[{_X}, []]", "ViewBackward0", (("aten::view", ()),))


def _transpose() -> Op:
    sizes = f"[[{B}, {T}, 12, 64], [], []]"
    return Op(("aten::transpose",), (), sizes, "TransposeBackward0", (("aten::transpose", ()),))


def _conv1d(name: str, sizes: str) -> Mod:
    mm = ("aten::mm", ("gemm_nn",))
    addmm = Op(
        ("aten::addmm",), ("gemm",), sizes, "AddmmBackward0", (mm, mm, ("aten::sum", ("sum",)))
    )
    return Mod(name, "Conv1D", (addmm,))


def _layer_norm(name: str) -> Mod:
    chain = ("aten::layer_norm", "aten::native_layer_norm")
    grads = (("aten::native_layer_norm_backward", ("layer_norm_bwd", "gamma_beta_bwd")),)
    norm = Op(
        chain, ("layer_norm",), f"[{_X}, [], [{C}], [{C}], []]", "NativeLayerNormBackward0", grads
    )
    return Mod(name, "LayerNorm", (norm,))


def _dropout(name: str) -> Mod:
    grads = (("aten::native_dropout_backward", ("dropout_bwd",)),)
    chain = ("aten::dropout", "aten::native_dropout")
    return Mod(
        name,
        "Dropout",
        (Op(chain, ("dropout",), f"[{_X}, [], []]", "NativeDropoutBackward0", grads),),
    )


def _add() -> Op:
    return Op(("aten::add",), ("add",), f"[{_X}, {_X}, []]", "AddBackward0")


def _attention() -> Mod:
    split = Op(
        ("aten::split",),
        (),
        f"[[{B}, {T}, {3 * C}], [], []]",
        "SplitBackward0",
        (("aten::cat", ("cat",)),),
    )
    sdpa_chain: tuple[str, ...]
    sdpa_chain = ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention")
    sdpa_chain += ("aten::_flash_attention_forward",)
    grads = (("aten::_flash_attention_backward", ("flash_bwd", "flash_bwd_dq")),)
    qkv = f"[[{B}, 12, {T}, 64], [{B}, 12, {T}, 64], [{B}, 12, {T}, 64], [], [], [], []]"
    sdpa = Op(sdpa_chain, ("flash_fwd",), qkv, "ScaledDotProductFlashAttentionBackward0", grads)
    contiguous = Op(
        ("aten::contiguous", "aten::clone", "aten::copy_"), ("copy",), f"[{_X}]", "CloneBackward0"
    )
    items: tuple[Mod | Op, ...]
    items = (_conv1d("c_attn", f"[[{C * 4 * 2}], [{B * T}, {C}], {_W3}, [], []]"), split)
    items += (*(_view() for _ in range(3)), *(_transpose() for _ in range(3)), sdpa, _transpose())
    items += (
        contiguous,
        _view(),
        _conv1d("c_proj", f"[[{C}], [{B * T}, {C}], [{C}, {C}], [], []]"),
    )
    return Mod("attn", "GPT2Attention", (*items, _dropout("resid_dropout")))


def _block(i: int) -> Mod:
    gelu = Op(
        ("aten::gelu",),
        ("gelu",),
        f"[[{B}, {T}, {4 * C}], []]",
        "GeluBackward0",
        (("aten::gelu_backward", ("gelu_bwd",)),),
    )
    mlp = Mod(
        "mlp",
        "GPT2MLP",
        (
            _conv1d("c_fc", f"[[{4 * C}], [{B * T}, {C}], {_W4}, [], []]"),
            Mod("act", "NewGELUActivation", (gelu,)),
            _conv1d("c_proj", f"[[{C}], [{B * T}, {4 * C}], [{4 * C}, {C}], [], []]"),
            _dropout("dropout"),
        ),
    )
    return Mod(
        f"h.{i}",
        "GPT2Block",
        (_layer_norm("ln_1"), _attention(), _add(), _layer_norm("ln_2"), mlp, _add()),
    )


def _embedding(name: str, hooks: bool) -> Mod:
    grads = (
        ("aten::embedding_backward", ()),
        ("aten::embedding_dense_backward", ("embedding_bwd",)),
    )
    chain = ("aten::embedding", "aten::index_select")
    op = Op(
        chain,
        ("embedding",),
        f"[[50304, {C}], [{B}, {T}], [], [], []]",
        "EmbeddingBackward0",
        grads,
    )
    return Mod(name, "Embedding", (op,), hooks)


def gpt2(n_layer: int) -> Mod:
    """GPT-2's module tree; the two outer modules return ModelOutputs, so get no backward range.

    The position embedding's backward hook does not fire either (its input needs
    no gradient), so its backward kernels lie outside every module range.
    """
    inner: tuple[Mod | Op, ...]
    inner = (_embedding("wte", True), _embedding("wpe", False), _add(), _dropout("drop"))
    inner += (*(_block(i) for i in range(n_layer)), _layer_norm("ln_f"))
    mm = ("aten::mm", ("gemm_nn",))
    head = Op(
        ("aten::linear", "aten::matmul", "aten::mm"),
        ("gemm",),
        f"[[{B}, {T}, {C}], [50304, {C}]]",
        "MmBackward0",
        (mm, mm),
    )
    model = (Mod("transformer", "GPT2Model", inner, hooks=False), Mod("lm_head", "Linear", (head,)))
    return Mod("", "GPT2LMHeadModel", model, hooks=False)


LOSS = (
    Op(
        ("aten::cross_entropy_loss", "aten::log_softmax", "aten::_log_softmax"),
        ("softmax",),
        f"[[{B * T}, 50304]]",
        "LogSoftmaxBackward0",
        (("aten::_log_softmax_backward_data", ("softmax_bwd",)),),
    ),
    Op(
        ("aten::nll_loss_nd", "aten::nll_loss", "aten::nll_loss_forward"),
        ("nll",),
        f"[[{B * T}, 50304], [{B * T}]]",
        "NllLossBackward0",
        (("aten::nll_loss_backward", ("fill", "nll_bwd")),),
    ),
)
