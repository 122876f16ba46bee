"""One GPT-2-like training step as a template of rows, for `nsysmap.synth_tile`.

A small tracer walks a GPT-2 module tree the way `nsysmap run` with PyTorch's
per-operator ranges (`emit_nvtx`) records it, and collects what one step of
one process writes into an export: ranges per thread, CUDA API calls, and the
GPU operations they launch. Per step::

    main      |step N: data|zero_grad|forward (modules > ops)|loss|backward ........|optimizer|
    autograd                                                   |bwd modules > nodes|
    stream 7       memcpy memset   kernels ...                      kernels ...       adam
    stream 20                                                       nccl all-reduce

Names follow the grammar of `instrument.naming` (`nsysmap:fwd:Conv1D:transformer.h.3.attn.c_attn`)
and PyTorch's NVTX style (`aten::addmm, seq = 12, op_id = 40, sizes = [[...]]`,
`aten::mm, stashed seq = 12, op_id = 99` on the autograd thread). Sequence
numbers, operator ids and correlation ids are step-local here; the tiler
offsets them per step. The template has a few hundred rows, so plain Python
is fine; nothing here runs per row of the final export.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

MAIN, AUTOGRAD = 0, 1  # thread slots of one process
NSYSMAP_DOMAIN, NCCL_DOMAIN = 1, 2  # NVTX domain ids (per process)
COMPUTE_STREAM, NCCL_STREAM = 7, 20

# key -> (demangled name, short name, typical GPU time in µs)
KERNELS: dict[str, tuple[str, str, int]] = {
    "gemm": (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_cluster1x2x1_execute_kernel"
        "__5x_cublas",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_cluster1x2x1_execute_kernel"
        "__5x_cublas",
        120,
    ),
    "gemm_nn": (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1_execute"
        "_segment_k_off_kernel__5x_cublas",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1_execute"
        "_segment_k_off_kernel__5x_cublas",
        130,
    ),
    "layer_norm": (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
        "float>(int, float, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)",
        "vectorized_layer_norm_kernel",
        18,
    ),
    "layer_norm_bwd": (
        "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::"
        "BFloat16, float>(const T1 *, const T1 *, const T2 *, const T2 *, const T1 *, T1 *, int)",
        "layer_norm_grad_input_kernel_vectorized",
        25,
    ),
    "gamma_beta_bwd": (
        "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<c10::"
        "BFloat16, float, 32u, 32u, 256u, false, true, true>(long, long, const T1 *, const T1 *, "
        "const T2 *, const T2 *, T1 *, T1 *)",
        "GammaBetaBackwardCUDAKernelTemplate",
        22,
    ),
    "flash_fwd": (
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
        "false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t>>"
        ", true, false, false, false, true, true, false>(pytorch_flash::Flash_fwd_params)",
        "flash_fwd_kernel",
        210,
    ),
    "flash_bwd": (
        "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits"
        "<64, 128, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<64, "
        "128, 128, 8, cutlass::bfloat16_t>>, true, true, false, false, true, true, false>"
        "(pytorch_flash::Flash_bwd_params)",
        "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel",
        520,
    ),
    "flash_bwd_dq": (
        "void pytorch_flash::flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8"
        ", 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 8, "
        "cutlass::bfloat16_t>>>(pytorch_flash::Flash_bwd_params, int)",
        "flash_bwd_convert_dq_kernel",
        15,
    ),
    "copy": (
        "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::"
        "native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::{lambda()#3}::operator ()() "
        "const::{lambda()#13}::operator ()() const::{lambda(c10::BFloat16)#1}>(at::"
        "TensorIteratorBase &, const T1 &)::{lambda(int)#1}>(int, T3)",
        "elementwise_kernel",
        30,
    ),
    "add": (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::"
        "BFloat16>, std::array<char *, 3>>(int, T2, T3)",
        "vectorized_elementwise_kernel",
        20,
    ),
    "gelu": (
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::"
        "TensorIteratorBase &, at::native::GeluType)::{lambda()#2}::operator ()() const::{lambda"
        "()#4}::operator ()() const::{lambda(c10::BFloat16)#1}, std::array<char *, 2>>(int, T2, "
        "T3)",
        "vectorized_elementwise_kernel",
        40,
    ),
    "gelu_bwd": (
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl"
        "(at::TensorIteratorBase &, at::native::GeluType)::{lambda()#2}::operator ()() const::"
        "{lambda()#4}::operator ()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array"
        "<char *, 3>>(int, T2, T3)",
        "vectorized_elementwise_kernel",
        55,
    ),
    "dropout": (
        "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float, "
        "unsigned int, 1, 8, bool>(at::cuda::detail::TensorInfo<const T1, T3>, at::cuda::detail"
        "::TensorInfo<T1, T3>, at::cuda::detail::TensorInfo<T6, T3>, T3, T2, at::PhiloxCudaState)",
        "fused_dropout_kernel_vec",
        25,
    ),
    "dropout_bwd": (
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
        "masked_scale_kernel<bool, c10::BFloat16, float>(at::Tensor &, const at::Tensor &, const "
        "at::Tensor &, float)::{lambda(c10::BFloat16, bool)#1}, std::array<char *, 3>>(int, T2, "
        "T3)",
        "vectorized_elementwise_kernel",
        22,
    ),
    "cat": (
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native"
        "::(anonymous namespace)::OpaqueType<2u>, unsigned int, 3, 128, 1>(T1 *, at::native::"
        "(anonymous namespace)::CatArrInputTensorMetadata<T1, T2, 128, 1>, at::native::"
        "(anonymous namespace)::TensorSizeStride<T2, 4u>, int, T2)",
        "CatArrayBatchedCopy_aligned16_contig",
        35,
    ),
    "sum": (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
        "func_wrapper_t<float, at::native::sum_functor<c10::BFloat16, float, float>::operator ()"
        "(at::TensorIterator &)::{lambda(float, float)#1}>, unsigned int, float, 4, 4>>(T3)",
        "reduce_kernel",
        12,
    ),
    "embedding": (
        "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, "
        "unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<T1, T3>, at::cuda::detail::"
        "TensorInfo<const T1, T3>, at::cuda::detail::TensorInfo<const T2, T3>, int, int, T3, T3, "
        "long)",
        "indexSelectLargeIndex",
        15,
    ),
    "embedding_bwd": (
        "void at::native::(anonymous namespace)::embedding_backward_feature_kernel<c10::BFloat16"
        ", float, long>(const T3 *, const T1 *, T1 *, int, long, int, int)",
        "embedding_backward_feature_kernel",
        60,
    ),
    "softmax": (
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, "
        "float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(T4 *, const T2 *, "
        "int)",
        "cunn_SoftMaxForward",
        90,
    ),
    "softmax_bwd": (
        "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, c10::BFloat16, float, "
        "float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(T2 *, const T4 *, "
        "const T4 *, int)",
        "cunn_SoftMaxBackward",
        95,
    ),
    "nll": (
        "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, "
        "float, long>(T1 *, T1 *, const T1 *, const T3 *, const T1 *, bool, long, long, long)",
        "nll_loss_forward_reduce_cuda_kernel_2d",
        10,
    ),
    "nll_bwd": (
        "void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, "
        "long>(T1 *, const T1 *, const T2 *, const T1 *, const T1 *, bool, int, int, long, long)",
        "nll_loss_backward_reduce_cuda_kernel_2d",
        8,
    ),
    "fill": (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::"
        "array<char *, 1>>(int, T2, T3)",
        "vectorized_elementwise_kernel",
        3,
    ),
    "adam": (
        "void at::native::multi_tensor_apply_kernel<at::native::TensorListMetadata<4>, at::native"
        "::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double *, double, "
        "double, double, double, double, bool, double *, double *>(T1, T2, T3...)",
        "multi_tensor_apply_kernel",
        300,
    ),
    "nccl": (
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm *, unsigned long, ncclWork *)",
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
        480,
    ),
}
# API name -> eventClass; the first three launch GPU work.
APIS = {
    "cudaLaunchKernel_v7000": 0,
    "cudaMemcpyAsync_v3020": 0,
    "cudaMemsetAsync_v3020": 0,
    "cudaEventRecord_v3020": 0,
    "cudaStreamWaitEvent_v3020": 0,
}


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


@dataclass
class Template:
    """The rows of one step of one process; times in ns from the step's start."""

    ranges: list[dict] = field(default_factory=list)
    calls: list[dict] = field(default_factory=list)
    gpu: list[dict] = field(default_factory=list)
    period_ns: int = 0
    n_seq: int = 0
    n_op_ids: int = 0


class Tracer:
    """Clocks per thread and per stream; records ranges, calls and GPU ops."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd
        self.out = Template()
        self.cpu = {MAIN: 0, AUTOGRAD: 0}
        self.stream_free = {COMPUTE_STREAM: 0, NCCL_STREAM: 0}

    def _cost(self, ns: int) -> int:
        return int(ns * self.rnd.uniform(0.8, 1.25))

    @contextmanager
    def range(self, thread: int, text: str, **name: object) -> Iterator[None]:
        """A push/pop range around the body; `name` holds seq, op_id, sizes, registered."""
        row = {"thread": thread, "text": text, "start": self.cpu[thread], **name}
        self.out.ranges.append(row)
        self.cpu[thread] += self._cost(400)
        yield
        self.cpu[thread] += self._cost(300)
        row["end"] = self.cpu[thread]

    def call(self, thread: int, api: str, gpu: dict | None = None) -> None:
        """A CUDA API call; with `gpu` ({kind, kernel, stream, dur, bytes}) it launches it."""
        start = self.cpu[thread]
        end = start + self._cost(3500 if gpu else 1200)
        self.out.calls.append({"thread": thread, "api": api, "start": start, "end": end})
        self.cpu[thread] = end + self._cost(600)
        if gpu is not None:
            stream = gpu["stream"]
            begin = max(end + 2000, self.stream_free[stream])
            self.stream_free[stream] = begin + self._cost(gpu.pop("dur") * 1000)
            corr = len(self.out.calls) - 1
            self.out.gpu.append(
                {**gpu, "corr": corr, "start": begin, "end": self.stream_free[stream]}
            )

    def kernel(self, thread: int, key: str, stream: int = COMPUTE_STREAM) -> None:
        """Launch kernel `key` (or, for "memcpy" / "memset", a copy / fill of 64 KiB)."""
        if key in ("memcpy", "memset"):
            gpu = {"kind": key, "kernel": None, "stream": stream, "dur": 30, "bytes": 1 << 16}
            api = "cudaMemcpyAsync_v3020" if key == "memcpy" else "cudaMemsetAsync_v3020"
            self.call(thread, api, gpu)
            return
        gpu = {"kind": "kernel", "kernel": key, "stream": stream, "dur": KERNELS[key][2]}
        self.call(thread, "cudaLaunchKernel_v7000", gpu)

    def op_id(self) -> int:
        self.out.n_op_ids += 1
        return self.out.n_op_ids - 1

    def op(self, thread: int, op: Op, seq: int | None = None, *, stashed: bool = False) -> None:
        """One operator call: its nested ranges, the innermost launching the kernels.

        The outermost range carries the autograd sequence number, if any.
        """
        with ExitStack() as stack:
            for depth, name in enumerate(op.chain):
                extra = {"seq": seq, "stashed": stashed} if depth == 0 and seq is not None else {}
                stack.enter_context(
                    self.range(thread, name, op_id=self.op_id(), sizes=op.sizes, **extra)
                )
            for key in op.kernels:
                self.kernel(thread, key)

    def forward(self, item: Mod | Op, prefix: str, seqs: dict[int, int]) -> None:
        """Module and operator ranges of a forward call on the main thread."""
        if isinstance(item, Op):
            seq = None
            if item.node is not None:
                seq = seqs[id(item)] = self.out.n_seq
                self.out.n_seq += 1
            self.op(MAIN, item, seq)
            return
        path = _path(prefix, item.name)
        with self.range(MAIN, f"nsysmap:fwd:{item.cls}:{path}", registered=NSYSMAP_DOMAIN):
            for child in item.items:
                self.forward(child, path, seqs)

    def backward(self, item: Mod | Op, prefix: str, seqs: dict[int, int]) -> None:
        """The backward of a forward call on the autograd thread, in reverse order."""
        if isinstance(item, Op):
            if item.node is None:
                return
            evaluate = f"autograd::engine::evaluate_function: {item.node}"
            with self.range(AUTOGRAD, evaluate):
                for name, kernels in item.backward:
                    self.op(AUTOGRAD, Op((name,), kernels), seqs[id(item)], stashed=True)
            return
        path = _path(prefix, item.name)
        with ExitStack() as stack:
            if item.hooks:
                name = f"nsysmap:bwd:{item.cls}:{path}"
                stack.enter_context(self.range(AUTOGRAD, name, registered=NSYSMAP_DOMAIN))
            for child in reversed(item.items):
                self.backward(child, path, seqs)
                if isinstance(child, Mod) and child.cls == "GPT2Block" and child.name[-1] in "37":
                    self.all_reduce()

    def all_reduce(self) -> None:
        """A DDP gradient bucket: an NCCL all-reduce launched from the autograd thread."""
        with self.range(AUTOGRAD, "ncclAllReduce", registered=NCCL_DOMAIN):
            self.call(AUTOGRAD, "cudaEventRecord_v3020")
            self.call(AUTOGRAD, "cudaStreamWaitEvent_v3020")
            self.kernel(AUTOGRAD, "nccl", NCCL_STREAM)


def _path(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix and name else prefix or name


# ---------------------------------------------------------------- the model
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
    sdpa_chain = ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention")
    sdpa_chain += ("aten::_flash_attention_forward",)
    grads = (("aten::_flash_attention_backward", ("flash_bwd", "flash_bwd_dq")),)
    qkv = f"[[{B}, 12, {T}, 64], [{B}, 12, {T}, 64], [{B}, 12, {T}, 64], [], [], [], []]"
    sdpa = Op(sdpa_chain, ("flash_fwd",), qkv, "ScaledDotProductFlashAttentionBackward0", grads)
    contiguous = Op(
        ("aten::contiguous", "aten::clone", "aten::copy_"), ("copy",), f"[{_X}]", "CloneBackward0"
    )
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


def step_template(n_layer: int, rnd: random.Random) -> Template:
    """One training step of one process; costs drawn from `rnd`."""
    tr, seqs, model = Tracer(rnd), {}, gpt2(n_layer)

    def phase(name: str) -> object:
        return tr.range(MAIN, f"nsysmap:phase:{name}", registered=NSYSMAP_DOMAIN)

    with tr.range(MAIN, "nsysmap:step:", registered=NSYSMAP_DOMAIN, step_range=True):
        with phase("data"):
            for _ in range(2):
                tr.op(MAIN, Op(("aten::to", "aten::_to_copy", "aten::copy_"), ("memcpy",)))
        with phase("zero_grad"), tr.range(MAIN, "Optimizer.zero_grad#AdamW.zero_grad"):
            for _ in range(4):
                tr.op(MAIN, Op(("aten::zero_", "aten::fill_"), ("memset",)))
        with phase("forward"):
            tr.forward(model, "", seqs)
        with phase("loss"):
            for op in LOSS:
                tr.forward(op, "", seqs)
        with phase("backward"):
            tr.op(MAIN, Op(("aten::ones_like", "aten::fill_"), ("fill",)))
            tr.cpu[AUTOGRAD] = tr.cpu[MAIN]
            for op in reversed(LOSS):
                tr.backward(op, "", seqs)
            tr.backward(model, "", seqs)
            tr.cpu[MAIN] = tr.cpu[AUTOGRAD] + 2000
        with phase("optimizer"), tr.range(MAIN, "Optimizer.step#AdamW.step"):
            tr.op(MAIN, Op(("aten::_fused_adamw_",), ("adam",) * 4))
    tr.out.period_ns = max(tr.cpu[MAIN], *tr.stream_free.values()) + 20_000
    return tr.out
