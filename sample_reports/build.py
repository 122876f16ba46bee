"""Build the synthetic GPT-2-shaped sample exports and their golden outputs.

    python -m sample_reports.build            # rewrite the .sqlite samples
    python -m sample_reports.build --golden   # ... and the expected outputs

The samples are SYNTHETIC: nsysmap's own builder (`devtools.synth`) writes
them in the nsys SQLite schema, with range names from `instrument.ranges.naming`,
whole-millisecond timings and made-up kernel names in the style of PyTorch's
CUDA kernels. They were not captured on a GPU. The timeline mimics what
`nsysmap run` records for a 2-block GPT-2: phases and forward ranges on the
main thread (tid 1), backward ranges on the autograd thread (tid 2), kernels
running asynchronously on one stream of device 0.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from devtools.synth import SynthExport
from instrument.ranges import naming

HERE = Path(__file__).parent
PID, MAIN, AUTOGRAD, DEVICE, STREAM = 1, 1, 2, 0, 7
N_LAYER = 2

GEMM = ("ampere_sgemm_128x64_tn", "ampere_sgemm_128x64_tn")
LAYER_NORM = (
    "void at::native::vectorized_layer_norm_kernel<float, float>(int, float, "
    "const float *, const float *, const float *, float *, float *, float *)",
    "vectorized_layer_norm_kernel",
)
SOFTMAX = (
    "void at::native::softmax_warp_forward<float, float, float, 7, false, false>"
    "(float *, const float *, int, int, int, const bool *, int, bool)",
    "softmax_warp_forward",
)
GELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl"
    "(at::TensorIteratorBase &, at::native::GeluType)::{lambda()#2}>(int, T2, T3)",
    "vectorized_elementwise_kernel",
)
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
    "(int, T2, T3)",
    "vectorized_elementwise_kernel",
)
EMBED = (
    "void at::native::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>(...)",
    "indexSelectLargeIndex",
)
XENT = (
    "void at::native::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::LogSoftMaxForwardEpilogue>(float *, const float *, int)",
    "cunn_SoftMaxForward",
)
XENT_BWD = (
    "void at::native::cunn_SoftMaxBackward<4, float, float, float, "
    "at::native::LogSoftMaxBackwardEpilogue>(float *, const float *, const float *, int)",
    "cunn_SoftMaxBackward",
)
ADAM = (
    "void at::native::multi_tensor_apply_kernel<at::native::TensorListMetadata<4>, "
    "at::native::FusedAdamMathFunctor<float, 4>>(...)",
    "multi_tensor_apply_kernel",
)
NCCL = (
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm *, unsigned long, ncclWork *)",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
)


@dataclass(frozen=True)
class Node:
    """A module: its attribute name, class, and what it runs in call order."""

    name: str
    cls: str
    items: tuple = ()  # Node children and (kernel, gpu ms) pairs, interleaved


def _block(i: int, slower_ms: int = 0) -> Node:
    return Node(
        f"h.{i}",
        "GPT2Block",
        (
            Node("ln_1", "LayerNorm", ((LAYER_NORM, 1),)),
            Node(
                "attn",
                "GPT2Attention",
                (
                    Node("c_attn", "Conv1D", ((GEMM, 3),)),
                    (GEMM, 2),
                    (SOFTMAX, 2),
                    (GEMM, 2),
                    Node("c_proj", "Conv1D", ((GEMM, 1),)),
                ),
            ),
            (ADD, 1),
            Node("ln_2", "LayerNorm", ((LAYER_NORM, 1),)),
            Node(
                "mlp",
                "GPT2MLP",
                (
                    Node("c_fc", "Conv1D", ((GEMM, 4 + slower_ms),)),
                    Node("act", "NewGELUActivation", ((GELU, 1),)),
                    Node("c_proj", "Conv1D", ((GEMM, 4),)),
                ),
            ),
            (ADD, 1),
        ),
    )


def model(slower: dict[int, int] | None = None) -> Node:
    """The module tree; `slower` adds ms to the c_fc gemm of some blocks (index -> ms)."""
    slower = slower or {}
    return Node(
        "",
        "GPT2LMHeadModel",
        (
            Node(
                "transformer",
                "GPT2Model",
                (
                    Node("wte", "Embedding", ((EMBED, 1),)),
                    *(_block(i, slower.get(i, 0)) for i in range(N_LAYER)),
                    Node("ln_f", "LayerNorm", ((LAYER_NORM, 1),)),
                ),
            ),
            Node("lm_head", "Linear", ((GEMM, 5),)),
        ),
    )


MODEL = model()


@dataclass
class Timeline:
    """CPU clocks per thread and one GPU stream; launches take 1 ms of CPU time."""

    b: SynthExport = field(default_factory=SynthExport)
    cpu: dict[int, int] = field(default_factory=lambda: {MAIN: 0, AUTOGRAD: 0})
    gpu: int = 0
    corr: int = 100
    model: Node = MODEL

    def launch(self, tid: int, kernel: tuple[str, str], gpu_ms: int) -> None:
        t = self.cpu[tid]
        self.corr += 1
        self.b.launch(PID, tid, t, t + 1, self.corr)
        start = max(self.gpu, t + 1)
        self.b.kernel(
            PID,
            DEVICE,
            STREAM,
            start,
            start + gpu_ms,
            self.corr,
            name=kernel[0],
            short_name=kernel[1],
        )
        self.gpu = start + gpu_ms
        self.cpu[tid] = t + 1

    def range(self, tid: int, name: str, body: callable) -> None:
        start = self.cpu[tid]
        body()
        self.cpu[tid] += 1
        self.b.range(PID, tid, start, self.cpu[tid], name, domain=naming.DOMAIN)

    def module(self, tid: int, direction: str, path: str, cls: str, body: callable) -> None:
        self.range(tid, naming.module_range(direction, path, cls), body)

    def sync(self, tid: int, *others: int) -> None:
        """Let `tid` wait for the GPU and the other threads."""
        self.cpu[tid] = max(self.gpu, self.cpu[tid], *(self.cpu[o] for o in others))


def _run(tl: Timeline, node: Node, prefix: str, tid: int, direction: str) -> None:
    """Ranges and launches of one module call; backward walks in reverse, gemms twice."""
    path = f"{prefix}.{node.name}" if prefix and node.name else prefix or node.name
    backward = direction == "backward"

    def body() -> None:
        for item in reversed(node.items) if backward else node.items:
            if isinstance(item, Node):
                _run(tl, item, path, tid, direction)
                continue
            kernel, ms = item
            for _ in range(2 if backward and kernel is GEMM else 1):
                tl.launch(tid, kernel, ms)

    if backward and node.cls in ("GPT2LMHeadModel", "GPT2Model"):
        body()  # modules returning a ModelOutput get no backward ranges
    else:
        # An Embedding's backward range stays open until its weight gradient
        # has been accumulated, so the weight-grad kernel lands inside it.
        tl.module(tid, direction, path, node.cls, body)


def _backward(tl: Timeline) -> None:
    tl.cpu[AUTOGRAD] = tl.cpu[MAIN]
    tl.launch(AUTOGRAD, XENT_BWD, 2)  # the loss's backward: outside every module range
    _run(tl, tl.model, "", AUTOGRAD, "backward")
    tl.sync(MAIN, AUTOGRAD)


def _step(tl: Timeline, step: int, train: bool) -> None:
    def body() -> None:
        tl.range(MAIN, naming.phase_range("data"), lambda: _copy_batch(tl))
        if train:
            tl.range(MAIN, naming.phase_range("zero_grad"), lambda: None)
        tl.range(
            MAIN, naming.phase_range("forward"), lambda: _run(tl, tl.model, "", MAIN, "forward")
        )
        if not train:
            tl.sync(MAIN)
            return
        tl.range(MAIN, naming.phase_range("loss"), lambda: tl.launch(MAIN, XENT, 2))
        tl.range(MAIN, naming.phase_range("backward"), lambda: _backward(tl))
        tl.range(
            MAIN,
            naming.phase_range("optimizer"),
            lambda: [tl.launch(MAIN, ADAM, 2) for _ in range(2)],
        )
        tl.sync(MAIN)

    tl.range(MAIN, naming.step_range(step), body)


def _copy_batch(tl: Timeline) -> None:
    t = tl.cpu[MAIN]
    tl.corr += 1
    tl.b.launch(PID, MAIN, t, t + 1, tl.corr, api="cudaMemcpyAsync_v3020")
    tl.b.memcpy(
        PID, DEVICE, STREAM, max(tl.gpu, t + 1), max(tl.gpu, t + 1) + 1, tl.corr, nbytes=8 * 128 * 8
    )
    tl.gpu = max(tl.gpu, t + 1) + 1
    tl.cpu[MAIN] = t + 1


def build(train: bool, steps: int = 2, slower: dict[int, int] | None = None) -> SynthExport:
    """The sample export: `steps` steps of training (or inference); `slower` as in `model`."""
    tl = Timeline(model=model(slower))
    tl.b.thread(PID, MAIN, "python")
    tl.b.thread(PID, AUTOGRAD, "pt_autograd_0")
    tl.b.gpu(DEVICE)
    # A collective whose launch happened before the capture window.
    tl.b.kernel(PID, DEVICE, 9, 0, 3, 42, name=NCCL[0], short_name=NCCL[1])
    for step in range(steps):
        _step(tl, step, train)
    tl.launch(MAIN, ADD, 1)  # after the last step: outside every range
    return tl.b


SAMPLES = {"gpt2_tiny_train": True, "gpt2_tiny_infer": False}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--golden", action="store_true", help="also rewrite the expected outputs")
    args = parser.parse_args(argv)
    for name, train in SAMPLES.items():
        path = HERE / f"{name}.sqlite"
        path.unlink(missing_ok=True)
        build(train).write(path)
        if args.golden:
            from sample_reports.golden import write_golden

            write_golden(path, HERE / "expected" / name)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
