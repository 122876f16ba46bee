"""Passes (steps) of one kernel sequence: where the whole sequence repeats.

Two ways, the first that finds something wins:

1. Host gaps: the sequence repeats at a step period with a long launch gap
   before each repeat (`period.step_period`); a pass starts at every launch
   of the kernel after those gaps. A boundary that no gap marks (a slowly
   launched warm-up pass followed at once by a timed loop) is found from
   its neighbour: one period before a start (or after the last), where the
   anchor kernel begins a repeat of the pass that follows it.
2. Stacks of blocks: passes run back to back (a forward benchmark), so no
   gap marks them, but every pass holds one stack of the block motif. The
   stacks of exact repeats of the block motif over the whole sequence,
   those of at least half the most repeats, each mark a pass; consecutive
   passes split at the longest launch gap between their stacks. (Exact: an
   inserted kernel would join two passes' stacks as readily as it bridges
   noise. Exact stacks at most a few motif lengths apart that one tolerant
   stack spans are joined all the same: layers of two kinds in turn, one
   kernel apart, are one stack of blocks, not passes of two layers each.)
   When one copy of the motif is itself a pass, each copy is one: it is
   mostly one stack of blocks (two forward passes back to back), or it
   holds an optimizer kernel (no block of a model launches one, so the
   motif is a whole training step repeated, as a CNN's steps are; a
   backward kernel is no such sign: backward blocks launch them), or it is
   the only stack and nothing but copies follows it (a model's blocks are
   followed by its head: a warm-up and a measured pass of a CNN).

Otherwise the sequence is one pass.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from nsysmap.infer.motif import (
    MIN_PERIOD_SCORE,
    PERIOD_WINDOW,
    Region,
    best_stacks,
    lag_score,
    stacks,
)
from nsysmap.infer.period import step_period

# A stack marks a pass when it has at least this share of the most repeats.
PASS_STACK_SHARE = 0.5


@dataclass(frozen=True)
class Evidence:
    """What the ops say beyond their kernel codes, per position of the sequence.

    `optimizer`: an optimizer kernel (only a training step launches one,
    outside its blocks). `synced`: a host-device copy was launched just
    before the kernel (the host waited for a result of the GPU). `data`: a
    copy or a fill, which may precede the passes; None where a stack filling
    all the rest is no sign of passes (a sequence without network kernels).
    `unlaunched`: the kernel has no launch call (the GPU ran it as the capture
    began: the tail of the step before).
    """

    optimizer: np.ndarray
    synced: np.ndarray | None = None
    data: np.ndarray | None = None
    unlaunched: np.ndarray | None = None  # launched before the capture (no launch call)


def passes(
    codes: np.ndarray, gaps_ns: np.ndarray, evidence: Evidence | None = None
) -> tuple[np.ndarray, int | None]:
    """Pass index per position (0, 1, ...), and the step period when host gaps gave it."""
    seen = evidence or Evidence(np.zeros(codes.size, bool))
    periodic = step_period(codes, gaps_ns)
    if periodic is not None:
        _, anchor, _, least_gap = periodic
        starts = (codes == anchor) & (gaps_ns >= 0.5 * least_gap)
        starts[0] = False
        if not _synced_layers(codes, np.flatnonzero(starts), seen):
            starts[_unmarked(codes, np.flatnonzero(starts), anchor, periodic[0])] = True
            steps = _at_optimizer_ends(np.cumsum(starts).astype(np.int64), seen)
            return steps, periodic[0]
    return _at_optimizer_ends(_by_stacks(codes, gaps_ns, seen), seen), None


# A stretch between two starts this many periods long or more holds an unmarked start.
UNMARKED_SPAN = 1.5


def _unmarked(codes: np.ndarray, starts: np.ndarray, anchor: int, period: int) -> list[int]:
    """Starts that no host gap marks, one period before each marked start (back to the
    sequence's start) and after the last: where the anchor kernel is, within
    PERIOD_WINDOW kernels, and the period it begins repeats the one beside it (at
    least MIN_PERIOD_SCORE of its kernels equal). A loop over passes, not kernels.

        marked:    |copies  warm-up  timed 1  |timed 2  |timed 3
        unmarked:  |copies  warm-up |timed 1  |timed 2  |timed 3
    """
    n, span, added = codes.size, int(UNMARKED_SPAN * period), []
    for lo, hi in itertools.pairwise([0, *starts.tolist()]):
        while hi - lo >= span and (p := _repeat_at(codes, hi - period, hi, lo, anchor)) is not None:
            added.append(p)
            hi = p
    last = int(starts[-1]) if starts.size else n
    while (
        n - last >= span + period // 2
        and (p := _repeat_at(codes, last + period, last, last, anchor)) is not None
    ):
        added.append(p)
        last = p
    return added


def _repeat_at(codes: np.ndarray, guess: int, other: int, after: int, anchor: int) -> int | None:
    """The position of the anchor kernel nearest `guess` (past `after`) whose period
    repeats the one starting at `other`; None where none does."""
    near = np.arange(max(guess - PERIOD_WINDOW, after + 1), guess + PERIOD_WINDOW + 1)
    near = near[(near < codes.size) & (near != other)]
    near = near[codes[near] == anchor]
    for p in near[np.argsort(np.abs(near - guess), kind="stable")]:
        width = min(abs(int(p) - other), codes.size - max(int(p), other))
        same = codes[p : p + width] == codes[other : other + width]
        if width > 0 and np.mean(same) >= MIN_PERIOD_SCORE:
            return int(p)
    return None


def _at_optimizer_ends(steps: np.ndarray, seen: Evidence) -> np.ndarray:
    """`steps` cut after each burst of optimizer kernels instead, where the bursts recur
    at a steady period: a training step ends with its optimizer, wherever the host's
    longest gap or a stack of blocks falls in it. What follows the last burst stays in
    the last pass (a metric update); a first pass mostly launched before the capture
    (the step before's tail) joins the next.

        found:      |F F B B O O F|F B B O O F F|...     (cut at a host gap in the step)
        optimizer:  |F F B B O O|F F B B O O|F F ...
    """
    n, passes = steps.size, int(steps[-1]) + 1
    at = np.flatnonzero(seen.optimizer)
    if passes < 2 or at.size == 0:
        return steps
    ends = at[np.append(np.diff(at) > n / passes / 4, True)]  # each burst's last kernel
    apart = np.diff(ends)[1:]  # the first burst may be a step's tail: not its whole
    if ends.size < 3 or np.abs(apart - np.median(apart)).max() > 0.25 * np.median(apart):
        return steps
    cuts = ends[:-1] + 1
    if seen.unlaunched is not None and seen.unlaunched[: cuts[0]].mean() >= 0.5:
        cuts = cuts[1:]
    return np.searchsorted(cuts, np.arange(n), side="right").astype(np.int64)


def _synced_layers(codes: np.ndarray, starts: np.ndarray, seen: Evidence) -> bool:
    """Whether the periods that host gaps mark are layers that wait for the GPU, not
    passes: most gaps follow a copy between host and device (a mixture of experts
    reading its routing, a pageable copy in every layer), no optimizer kernel, and a
    period holds no stack of blocks of its own (each token of a model's decoding does)."""
    if seen.synced is None or starts.size < 2 or seen.optimizer.any():
        return False
    if seen.synced[starts].mean() < 0.5:
        return False
    return not _holds_blocks(codes[starts[0] : starts[1]])


def _by_stacks(codes: np.ndarray, gaps_ns: np.ndarray, seen: Evidence) -> np.ndarray:
    found = best_stacks(codes, np.ones(codes.size, bool), tolerant=False)
    if not found:
        return np.zeros(codes.size, np.int64)
    lag = found[0].length
    top = max(found, key=lambda r: r.end - r.start)
    one = codes[top.start : top.start + lag]
    whole = seen.optimizer[top.start : top.start + lag].any() or _fills(top, found, seen)
    if whole or _holds_blocks(one):
        # The motif is a whole pass (two passes back to back, a training step): each
        # repeat is one.
        inner = [r.start + k * lag for r in found for k in range(1, r.repeats)]
        between = [_cut(gaps_ns, a.end, b.start) for a, b in itertools.pairwise(found)]
        cuts = np.sort(np.array(inner + between, np.int64))
        return np.searchsorted(cuts, np.arange(codes.size), side="right").astype(np.int64)
    start, end = _unbroken(codes, found, lag)
    if start.size < 2:
        return np.zeros(codes.size, np.int64)
    repeats = (end - start) / lag
    keep = repeats >= PASS_STACK_SHARE * repeats.max()
    start, end = start[keep], end[keep]
    if start.size < 2:
        return np.zeros(codes.size, np.int64)
    cuts = np.array(
        [_cut(gaps_ns, int(lo), int(hi)) for lo, hi in zip(end[:-1], start[1:], strict=True)]
    )
    # The passes must themselves repeat: stacks of a short motif scattered over one
    # pass (a training step's few blocks, a mixture of experts) are no passes.
    # and their blocks must make up most of them (else the stacks are parts of blocks).
    length = int(np.median(np.diff(start)))
    if lag_score(codes, length) < MIN_PERIOD_SCORE or (end - start).sum() < 0.5 * codes.size:
        return np.zeros(codes.size, np.int64)
    return np.searchsorted(cuts, np.arange(codes.size), side="right").astype(np.int64)


# Exact stacks are joined only when their starts lie at most this many motif lengths
# apart: a period of two or three layers (of two kinds) and a kernel or two more.
# Passes run back to back hold more blocks, or a stem and head that break the
# tolerant stack.
JOINED_SPACING = 3.5


def _unbroken(codes: np.ndarray, found: list[Region], lag: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the exact stacks, those that one tolerant stack of the same motif
    spans (an inserted or dropped kernel tolerated) taken as one where they start at
    most JOINED_SPACING motif lengths apart: a model whose layers alternate between
    two kinds (one kernel more in every other layer) has one stack of blocks, which
    an exact match cuts into pairs of layers.

        exact:     |A B|x|A B|x|A B|      three stacks of two blocks (x: the kernel more)
        tolerant:  |A B x A B x A B|      one stack: one pass, not three
    """
    start = np.array([r.start for r in found], np.int64)  # in sequence order, as `stacks`
    end = np.array([r.end for r in found], np.int64)
    if start.size < 2 or np.median(np.diff(start)) > JOINED_SPACING * lag:
        return start, end
    tolerant = stacks(codes, lag, np.ones(codes.size, bool), tolerant=True)
    if not tolerant:
        return start, end
    lo = np.array([r.start for r in tolerant], np.int64)
    hi = np.array([r.end for r in tolerant], np.int64)
    # The tolerant stack around each exact one's middle (-1: none); neighbours in the
    # same one are joined.
    middle = (start + end) // 2
    at = np.searchsorted(lo, middle, side="right") - 1
    inside = (at >= 0) & (middle < hi[np.clip(at, 0, None)])
    group = np.where(inside, at, -1 - np.arange(start.size))
    first = np.concatenate(([True], group[1:] != group[:-1]))
    last = np.concatenate((first[1:], [True]))
    return start[first], end[last]


def _fills(top: Region, found: list[Region], seen: Evidence) -> bool:
    """Whether the only stack runs to the end of the sequence, copies and fills aside:
    forward passes back to back (a warm-up and a measured pass). A model's blocks leave
    kernels after them (final norm, head); before them, initialisation may run."""
    if seen.data is None or len(found) != 1:
        return False
    return bool(seen.data[top.end :].all())


def _holds_blocks(one: np.ndarray) -> bool:
    """Whether one pass (one repeat of a motif) is itself mostly one stack of blocks."""
    inner = best_stacks(one, np.ones(one.size, bool), tolerant=False, whole=False)
    return 2 * max((r.end - r.start for r in inner), default=0) >= one.size


def _cut(gaps_ns: np.ndarray, lo: int, hi: int) -> int:
    """Where the next pass starts between two stacks: after the longest launch gap."""
    return hi if hi <= lo else lo + int(np.argmax(gaps_ns[lo : hi + 1]))
