"""Benchmark-shaped exports: set-up copies, warm-up, a timed loop, with ranges as people
write them (for the structure model's tests, nsysmap.structure).

Three shapes of a course assignment's benchmark of a small Transformer, each a
synthetic nsys export written with `SynthExport`:

* `SETUP_WARMUP_TIMED`: the weights copied host-to-device in a set-up range,
  a warm-up range holding `warmup` forward passes, then a timed range holding
  `passes` forward passes; attention sub-ranges inside every layer of every pass;
* `SUBRANGES_ONLY`: host-to-device copies, then `passes` forward passes with no
  range around a pass or a layer, only the attention sub-ranges inside each layer;
* `WARMUP_STEPS_THEN_FORWARD`: a warm-up range of `warmup` steps, each a range
  holding a forward and a backward range (backward launched by autograd's
  thread), then a benchmark range (one, or one per pass) of `passes` forward
  ranges.

Every range can be renamed (`names`, by role) or left out (None). The truth
of each export comes back with it (`Truth`): which passes it holds, where.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from devtools.synth.builder import SynthExport

SETUP_WARMUP_TIMED = "setup_warmup_timed"
SUBRANGES_ONLY = "subranges_only"
WARMUP_STEPS_THEN_FORWARD = "warmup_steps_then_forward"
SHAPES = (SETUP_WARMUP_TIMED, SUBRANGES_ONLY, WARMUP_STEPS_THEN_FORWARD)
# The ranges of each role, as the shapes name them unless told otherwise.
DEFAULT_NAMES = {
    "setup": "setup_model",
    "warmup": "warm_up",
    "timed": "timed_iterations",
    "step": "warmup_iter_{i}",
    "forward": "fwd",
    "backward": "bwd",
    "attention": "attention",
    "scores": "attention scores",
    "softmax": "softmax",
    "output": "output matmul",
}
GEMM, SCORES, OUTPUT = "ampere_sgemm_128x64_tn", "ampere_sgemm_128x64_nn", "ampere_sgemm_64x64_nn"
SOFTMAX, ADD, MUL = "softmax_warp_forward", "vectorized_elementwise_kernel", "elementwise_kernel"
REDUCE, EMBED, SILU = "reduce_kernel", "indexSelectLargeIndex", "silu_kernel"
BWD_GEMM, BWD_SOFTMAX = "ampere_sgemm_64x32_sliced1x4_nt", "softmax_warp_backward"
MAIN, AUTOGRAD, PID, DEVICE, STREAM = 1, 2, 1, 0, 7
_US = 1e-3  # one microsecond in the builder's milliseconds


@dataclass(frozen=True)
class Spec:
    """What to build: the shape, its sizes and its range names (None: no such range)."""

    shape: str
    layers: int = 4
    passes: int = 3  # measured forward passes
    warmup: int = 1  # warm-up passes (or steps, with forward and backward)
    copies: int = 20  # host-to-device copies of the set-up
    copy_us: float = 400.0  # each copy's duration
    names: dict[str, str | None] = field(default_factory=dict)
    bench_per_pass: bool = False  # one benchmark range per pass (else one around them)
    slow_first: bool = False  # the first pass launched 20 times slower (first calls)

    def name(self, role: str) -> str | None:
        return self.names.get(role, DEFAULT_NAMES[role])


@dataclass
class Truth:
    """What the export holds: pass spans by kind, kernel calls, time."""

    warmup_forward: int = 0  # forward passes before the measured ones
    warmup_backward: int = 0
    measured_forward: int = 0
    layers: int = 0
    copy_ns: int = 0
    measured: list[tuple[int, int]] = field(default_factory=list)  # forward pass host spans


@dataclass
class _Writer:
    """The export being written: the host and GPU clocks (µs), ids."""

    spec: Spec
    out: SynthExport = field(default_factory=SynthExport)
    host: float = 100.0
    gpu: float = 0.0
    corr: int = 0
    rnd: random.Random = field(default_factory=lambda: random.Random(0))
    slow: bool = False  # launches take 20 times as long (the first pass of a run)
    first: bool = True  # no pass written yet

    def launch(self, name: str, dur: float, tid: int = MAIN) -> None:
        self.corr += 1
        start = self.host
        self.out.launch(PID, tid, start * _US, (start + 4) * _US, self.corr)
        begin = max(start + 6, self.gpu)
        end = begin + dur * (1 + 0.05 * self.rnd.random())
        self.out.kernel(PID, DEVICE, STREAM, begin * _US, end * _US, self.corr, name=name)
        self.gpu, self.host = end, start + (140 if self.slow else 7)

    def copy(self, dur: float) -> None:
        self.corr += 1
        start = self.host
        api = "cudaMemcpyAsync_v3020"
        self.out.launch(PID, MAIN, start * _US, (start + 5) * _US, self.corr, api=api)
        begin = max(start + 6, self.gpu)
        self.out.memcpy(PID, DEVICE, STREAM, begin * _US, (begin + dur) * _US, self.corr)
        self.gpu, self.host = begin + dur, start + 8

    def sync(self) -> None:
        """The host waits for the GPU, then spends a while in Python (timing, logging)."""
        self.host = max(self.host, self.gpu) + 300

    def range(self, name: str | None, start: float, tid: int = MAIN) -> None:
        if name is not None:
            self.out.range(PID, tid, start * _US, (self.host + 1) * _US, name)

    def named(self, role: str, i: int = 0) -> str | None:
        name = self.spec.name(role)
        return None if name is None else name.format(i=i)


def _sub(w: _Writer, role: str, kernels: list[tuple[str, float]]) -> None:
    start = w.host
    for name, dur in kernels:
        w.launch(name, dur)
    w.range(w.named(role), start)
    w.host += 2


def _layer(w: _Writer) -> None:
    for name, dur in [(ADD, 3), (REDUCE, 4), (MUL, 3), (GEMM, 40), (GEMM, 40), (GEMM, 40)]:
        w.launch(name, dur)
    start = w.host
    _sub(w, "scores", [(SCORES, 20), (MUL, 3)])
    _sub(w, "softmax", [(SOFTMAX, 10)])
    _sub(w, "output", [(OUTPUT, 20)])
    w.range(w.named("attention"), start)
    for name, dur in [(GEMM, 30), (ADD, 3), (REDUCE, 4), (MUL, 3), (GEMM, 60), (SILU, 5)]:
        w.launch(name, dur)
    for name, dur in [(GEMM, 60), (MUL, 3), (ADD, 3)]:
        w.launch(name, dur)


def forward_pass(w: _Writer, ranged: bool) -> tuple[int, int]:
    """One forward pass (in a forward range when `ranged`); its host span in ns. The
    run's first pass is slow to launch where the spec says so."""
    w.slow, w.first = w.spec.slow_first and w.first, False
    start = w.host
    w.launch(EMBED, 5)
    for _ in range(w.spec.layers):
        _layer(w)
    for name, dur in [(ADD, 3), (REDUCE, 4), (MUL, 3), (GEMM, 120)]:
        w.launch(name, dur)
    end = w.host
    if ranged:
        w.range(w.named("forward"), start)
    w.host += 3
    w.slow = False
    return round(start * 1e3), round(end * 1e3)


def backward_pass(w: _Writer) -> None:
    """Backward launched by autograd's thread while the main thread waits in a range."""
    start = w.host
    for _ in range(w.spec.layers):
        for name, dur in [(BWD_GEMM, 60), (BWD_GEMM, 60), (MUL, 3), (BWD_GEMM, 40)]:
            w.launch(name, dur, tid=AUTOGRAD)
        for name, dur in [(BWD_SOFTMAX, 12), (BWD_GEMM, 25), (BWD_GEMM, 25), (ADD, 3)]:
            w.launch(name, dur, tid=AUTOGRAD)
    w.range(w.named("backward"), start)
    w.host += 3


def _setup(w: _Writer, truth: Truth) -> None:
    start = w.host
    for _ in range(w.spec.copies):
        w.copy(w.spec.copy_us)
    w.sync()
    truth.copy_ns = round(w.spec.copies * w.spec.copy_us * 1e3)
    w.range(w.named("setup"), start)
    w.host += 50


def _forward_loop(w: _Writer, role: str | None, count: int, truth: Truth, measured: bool) -> None:
    start = w.host
    for _ in range(count):
        span = forward_pass(w, ranged=False)
        w.sync()
        if measured:
            truth.measured.append(span)
    if role is not None:
        w.range(w.named(role), start)
    w.host += 50


def _shape_one(w: _Writer, truth: Truth) -> None:
    _setup(w, truth)
    _forward_loop(w, "warmup", w.spec.warmup, truth, measured=False)
    _forward_loop(w, "timed", w.spec.passes, truth, measured=True)


def _shape_two(w: _Writer, truth: Truth) -> None:
    """No range tells warm-up from timed passes: every pass is measured."""
    _setup(w, truth)
    _forward_loop(w, None, w.spec.warmup + w.spec.passes, truth, measured=True)


def _shape_three(w: _Writer, truth: Truth) -> None:
    start = w.host
    for i in range(w.spec.warmup):
        step = w.host
        forward_pass(w, ranged=True)
        backward_pass(w)
        w.sync()
        w.range(w.named("step", i), step)
        w.host += 20
    w.range(w.named("warmup"), start)
    w.host += 100
    start = w.host
    for _ in range(w.spec.passes):
        one = w.host
        truth.measured.append(forward_pass(w, ranged=True))
        w.sync()
        if w.spec.bench_per_pass:
            w.range(w.named("timed"), one)
            w.host += 20
    if not w.spec.bench_per_pass:
        w.range(w.named("timed"), start)


_BUILD = {SETUP_WARMUP_TIMED: _shape_one, SUBRANGES_ONLY: _shape_two}
_BUILD[WARMUP_STEPS_THEN_FORWARD] = _shape_three


def build(spec: Spec, path: Path, seed: int = 0) -> Truth:
    """Write the export of `spec` to `path`; what it holds."""
    w = _Writer(spec, rnd=random.Random(seed))
    w.out.thread(PID, MAIN, "python")
    w.out.thread(PID, AUTOGRAD, "pt_autograd_0")
    w.out.gpu(DEVICE, "NVIDIA A100-SXM4-80GB")
    backward = spec.shape == WARMUP_STEPS_THEN_FORWARD
    unmarked = spec.shape == SUBRANGES_ONLY
    truth = Truth(
        warmup_forward=0 if unmarked else spec.warmup,
        warmup_backward=spec.warmup if backward else 0,
        measured_forward=spec.passes + (spec.warmup if unmarked else 0),
        layers=spec.layers,
    )
    _BUILD[spec.shape](w, truth)
    w.out.write(path)
    return truth
