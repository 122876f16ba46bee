"""What the launching threads say about a pass: backward, optimizer, the step before.

Pure NumPy over one pass's (or sequence's) positions, for nsysmap.infer.label.
A kernel launched by another thread than its pass's first (`other`: autograd's
`pt_autograd_N`) is backward work; what the first thread launches after that
thread is done is the optimizer's step; kernels without a launching thread ran
from before the capture and repeat captured work; and some repeated motifs are
no layers.
"""

from __future__ import annotations

import numpy as np

from instrument.phase_vocabulary import INFERRED_PHASES
from instrument.phase_vocabulary import OPTIMIZER as _OPTIMIZER_NAME
from nsysmap.attribution.record_repeat import repeated_at
from nsysmap.infer.motif import Region

# Index of the optimizer phase in INFERRED_PHASES (nsysmap.infer.label's codes).
OPTIMIZER = INFERRED_PHASES.index(_OPTIMIZER_NAME)
# A second motif is a backward one when this share of it runs on another launching thread.
OTHER_THREAD_SHARE = 0.5


def repeated_work(
    phase: np.ndarray, codes: np.ndarray, unlaunched: np.ndarray, stream: np.ndarray
) -> None:
    """Per stream, the kernels launched before the capture (no launching thread) take
    the phases of the captured kernels they repeat, as records' work does
    (nsysmap.attribution.record_repeat): the tail of the step before the capture."""
    if unlaunched.all():
        return  # no launching threads at all
    for s in np.unique(stream[unlaunched]):
        on = stream == s
        head, rest = np.flatnonzero(on & unlaunched), np.flatnonzero(on & ~unlaunched)
        if rest.size == 0:
            continue
        at = repeated_at(codes[head], codes[rest], bool(phase[rest[-1]] == OPTIMIZER))
        if at is not None:
            phase[head] = phase[rest[at : at + head.size]]


def other_thread(tid: np.ndarray) -> np.ndarray:
    """Per op of a pass: launched by another thread than its forward one, the thread
    that launched its first op with a known launch (ops launched before the capture
    began have none, -1, and count as the forward thread's)."""
    known = np.flatnonzero(tid >= 0)
    if known.size == 0:
        return np.zeros(tid.size, bool)
    other: np.ndarray = (tid != tid[known[0]]) & (tid >= 0)
    return other


def layers(
    regions: tuple[Region, ...],
    other: np.ndarray,
    unlaunched: np.ndarray,
    layer: np.ndarray,
    after: int,
) -> tuple[Region, ...]:
    """The motifs that are a model's layers: with a layer's kernel (`LAYER_KERNELS`,
    where the pass has any: not a metric's update repeated per metric), not an
    optimizer's loop over its parameters
    (after autograd's thread is done), not mostly work launched before the capture (the
    step before's tail), and none when the first left is autograd's alone (two backward
    nodes alike, whose forward did not repeat, are no layers)."""
    kept = tuple(
        r
        for r in regions
        if r.start < after
        and unlaunched[r.start : r.end].mean() < OTHER_THREAD_SHARE
        and (layer[r.start : r.end].any() or not layer.any())
    )
    if kept and other[kept[0].start : kept[0].end].mean() >= OTHER_THREAD_SHARE:
        return ()
    return kept


def after_autograd(other: np.ndarray) -> int:
    """Where a pass's kernels are its first thread's again for good, after the last one
    another thread (autograd's) launched: the optimizer's step once backward is done.
    The pass's length when no other thread launched any."""
    launched = np.flatnonzero(other)
    return int(launched[-1]) + 1 if launched.size else other.size


def autograd_start(other: np.ndarray, special: np.ndarray) -> int | None:
    """The first kernel launched by another thread than the pass's first when, from it
    on, most kernels (copies, fills and optimizer kernels aside) are (autograd's); the
    caller leaves out what follows that thread's last kernel (the optimizer's step)."""
    kernel = special < 0
    launched = other & kernel
    if not launched.any() or other[int(np.argmax(kernel))]:
        return None  # none, or the pass's first kernel is another thread's
    start = int(np.argmax(launched))
    rest = launched[start:][kernel[start:]]
    return start if rest.mean() >= OTHER_THREAD_SHARE else None


def backward_evidence(
    second: Region, backish: np.ndarray, other: np.ndarray, special: np.ndarray
) -> bool:
    """A second motif is a backward pass only with evidence: most of it launched by
    another thread (autograd's), a backward kernel in it, or optimizer work after it."""
    span = slice(second.start, second.end)
    return bool(
        other[span].mean() >= OTHER_THREAD_SHARE
        or backish[span].any()
        or (special[second.start :] == OPTIMIZER).any()
    )
