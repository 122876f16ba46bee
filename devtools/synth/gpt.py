"""One GPT-2-like training step as a template of rows, for `devtools.synth.tile`.

A small tracer walks a GPT-2 module tree the way `nsysmap run` with PyTorch's
per-operator ranges (`emit_nvtx`) records it, and collects what one step of
one process writes into an export: ranges per thread, CUDA API calls, and the
GPU operations they launch. Per step::

    main      |step N: data|zero_grad|forward (modules > ops)|loss|backward ........|optimizer|
    autograd                                                   |bwd modules > nodes|
    stream 7       memcpy memset   kernels ...                      kernels ...       adam
    stream 20                                                       nccl all-reduce

Names follow the grammar of `instrument.ranges.naming`
(`nsysmap:fwd:Conv1D:transformer.h.3.attn.c_attn`) and PyTorch's NVTX style
(`aten::addmm, seq = 12, op_id = 40, sizes = [[...]]`,
`aten::mm, stashed seq = 12, op_id = 99` on the autograd thread). Sequence
numbers, operator ids and correlation ids are step-local here; the tiler
offsets them per step. The template has a few hundred rows, so plain Python
is fine; nothing here runs per row of the final export.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field

from devtools.synth.gpt2_model import LOSS, Mod, Op, gpt2
from devtools.synth.kernels import KERNELS

MAIN, AUTOGRAD = 0, 1  # thread slots of one process
NSYSMAP_DOMAIN, NCCL_DOMAIN = 1, 2  # NVTX domain ids (per process)
COMPUTE_STREAM, NCCL_STREAM = 7, 20

# API name -> eventClass; the first three launch GPU work.
APIS = {
    "cudaLaunchKernel_v7000": 0,
    "cudaMemcpyAsync_v3020": 0,
    "cudaMemsetAsync_v3020": 0,
    "cudaEventRecord_v3020": 0,
    "cudaStreamWaitEvent_v3020": 0,
}


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


def step_template(n_layer: int, rnd: random.Random, tracer: Tracer | None = None) -> Template:
    """One training step of one process; costs drawn from `rnd` (or by `tracer`'s own)."""
    tr, seqs, model = tracer or Tracer(rnd), dict[int, int](), gpt2(n_layer)

    def phase(name: str) -> AbstractContextManager[None]:
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
