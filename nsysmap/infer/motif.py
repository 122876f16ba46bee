"""Periodicity in a sequence of integer kernel codes (pure NumPy, no per-kernel loop).

Two questions about a sequence `codes` (kernel names hashed to integers, in
execution order):

* `step_period`: the lag P at which the whole sequence repeats (a training
  step or an inference batch), and the offset within P where a period starts.
* `motif_regions`: within one period, the stretches where a subsequence of B
  kernels repeats L times back to back (the blocks of a transformer's forward,
  and the mirrored blocks of its backward).

Candidate lags are the most common gaps between repeats of the same code;
each candidate is scored with one vectorised comparison of the sequence with
itself shifted by the lag, so the cost is O(n x candidates).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_CANDIDATES = 48
# A lag is a step period when this share of kernels equals the kernel one lag later.
MIN_PERIOD_SCORE = 0.5
# Lags whose score is this close to the best count as equally good (the smallest wins).
SCORE_TIE = 0.005
# A step boundary must be an idle gap this many times the typical gap between kernels.
MIN_BOUNDARY_GAP_RATIO = 20.0
MIN_REPEATS = 2
# A block motif has at least this many kernels (one kernel repeated is no block).
MIN_MOTIF = 2
# Kernels by which two repeats of a step may be out of line (inserted or missing kernels).
PERIOD_WINDOW = 2
# How many of the longest launch gaps propose step periods.
GAP_CANDIDATES = 64


@dataclass(frozen=True)
class Region:
    """`repeats` copies of a motif of `length` kernels starting at `start`."""

    start: int
    length: int
    repeats: int

    @property
    def end(self) -> int:
        return self.start + self.length * self.repeats


def candidate_lags(codes: np.ndarray, limit: int) -> np.ndarray:
    """Lags (<= limit) that separate repeats of a code, the most common first.

    The most common gaps overall, and each code's own most common gap (a
    kernel launched once per step repeats at the step period, however rare).
    """
    if codes.size < 2 or limit < 1:
        return np.empty(0, np.int64)
    order = np.lexsort((np.arange(codes.size), codes))
    same = codes[order][1:] == codes[order][:-1]
    gaps = (order[1:] - order[:-1])[same]
    owner = codes[order][1:][same]
    keep = (gaps >= 1) & (gaps <= limit)
    gaps, owner = gaps[keep], owner[keep]
    if gaps.size == 0:
        return np.empty(0, np.int64)
    values, counts = np.unique(gaps, return_counts=True)
    common = values[np.argsort(-counts, kind="stable")][:MAX_CANDIDATES]
    width = np.int64(codes.size + 1)
    pairs, pair_counts = np.unique(owner.astype(np.int64) * width + gaps, return_counts=True)
    pair_owner, pair_gap = pairs // width, pairs % width
    by_code = np.lexsort((-pair_counts, pair_owner))
    first = np.concatenate(([True], pair_owner[by_code][1:] != pair_owner[by_code][:-1]))
    modal = pair_gap[by_code][first]
    lags, seen = np.unique(np.concatenate([common, modal]), return_index=True)
    return lags[np.argsort(seen)].astype(np.int64)


def lag_score(codes: np.ndarray, lag: int, window: int = 0) -> float:
    """Share of positions whose code recurs `lag` (+- `window`) positions later.

    The window tolerates a few kernels inserted or missing between two
    repeats; the score is scaled so that chance matches give 0 and a perfect
    repeat 1.
    """
    n = codes.size
    w = window
    if not w < lag < n - 2 * w:
        return 0.0
    head = codes[w : n - lag - w]
    hit = np.zeros(head.size, bool)
    for d in range(-w, w + 1):
        hit |= head == codes[w + lag + d : n - w + d]
    freq = np.bincount(codes - codes.min()) / n
    chance = min(0.99, float(np.sum(freq**2)) * (2 * window + 1))
    return (float(np.mean(hit)) - chance) / (1.0 - chance)


def step_period(codes: np.ndarray, gaps_ns: np.ndarray) -> tuple[int, int, float, float] | None:
    """(period, anchor code, score, least boundary gap), or None when not periodic.

    `gaps_ns[i]` is the time between the launches of kernel i-1 and i. A lag
    is a period when the sequence recurs at it (within PERIOD_WINDOW kernels)
    for at least MIN_PERIOD_SCORE of its kernels beyond chance; the smallest
    of the best lags wins. A lag counts when the longest launch gaps, one
    per period, are clearly longer than the typical gap (steps are separated
    by host work; blocks inside a step are not), and the kernel after them,
    the anchor, starts each period.
    """
    lags = np.union1d(candidate_lags(codes, codes.size // 2), _gap_lags(gaps_ns))
    lags = lags[(lags > PERIOD_WINDOW) & (lags <= codes.size // 2)]
    if lags.size == 0:
        return None
    scores = np.array([lag_score(codes, int(k), PERIOD_WINDOW) for k in lags])
    typical = max(float(np.median(gaps_ns[1:])), 1.0)
    by_gap = np.argsort(-gaps_ns[1:], kind="stable") + 1
    passing = {}
    for lag, score in zip(lags, scores, strict=True):
        if score >= MIN_PERIOD_SCORE:
            anchor, least, spaced = _anchor(codes, gaps_ns, by_gap, int(lag))
            if spaced and least / typical >= MIN_BOUNDARY_GAP_RATIO:
                passing[int(lag)] = (anchor, float(score), least)
    if not passing:
        return None
    best = max(score for _, score, _ in passing.values())
    period = min(lag for lag, (_, score, _) in passing.items() if score >= best - SCORE_TIE)
    return (period, *passing[period])


def _gap_lags(gaps_ns: np.ndarray) -> np.ndarray:
    """Distances between the longest launch gaps (where steps tend to start)."""
    longest = np.sort(np.argsort(-gaps_ns, kind="stable")[:GAP_CANDIDATES])
    return np.unique(np.diff(longest)).astype(np.int64)


def _anchor(
    codes: np.ndarray, gaps_ns: np.ndarray, by_gap: np.ndarray, period: int
) -> tuple[int, float, bool]:
    """The code after the longest gaps (one per period), the least of those gaps,
    and whether most of them lie one period (within a tenth) apart."""
    count = max(codes.size // period - 1, 1)
    longest = np.sort(by_gap[:count])
    apart = np.abs(np.diff(longest) - period) <= max(PERIOD_WINDOW, period // 10)
    spaced = bool(apart.mean() >= 0.5) if apart.size else True
    anchor = int(np.bincount(codes[longest] - codes.min()).argmax() + codes.min())
    return anchor, float(np.min(gaps_ns[longest])), spaced


def longest_run(codes: np.ndarray, lag: int, allowed: np.ndarray) -> tuple[int, int]:
    """(start, length) of the longest run of i with codes[i] == codes[i+lag], both allowed."""
    if not 0 < lag < codes.size:
        return 0, 0
    match = (codes[:-lag] == codes[lag:]) & allowed[:-lag] & allowed[lag:]
    if not match.any():
        return 0, 0
    edges = np.diff(np.concatenate(([0], match.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    best = int(np.argmax(ends - starts))
    return int(starts[best]), int(ends[best] - starts[best])


def best_region(codes: np.ndarray, allowed: np.ndarray) -> Region | None:
    """The repeated motif covering the most kernels among the allowed positions.

    A run of R matches at lag B covers R + B kernels: L = (R + B) // B whole
    repeats, and the kernels left over are split evenly before and after them
    (the context around a stack of blocks tends to resemble both its first and
    its last block). Ties go to the shorter motif, so 2B never beats B.
    """
    masked = np.where(allowed, codes, -1 - np.arange(codes.size))
    best: tuple[int, int, int] | None = None  # (-covered, lag, start)
    for lag in candidate_lags(masked, codes.size // MIN_REPEATS):
        start, run = longest_run(masked, int(lag), allowed)
        covered = run + int(lag)
        if run > 0 and lag >= MIN_MOTIF and covered // lag >= MIN_REPEATS:
            key = (-covered, int(lag), start)
            best = key if best is None or key < best else best
    if best is None:
        return None
    covered, lag, start = -best[0], best[1], best[2]
    repeats = covered // lag
    return Region(start + (covered - repeats * lag) // 2, lag, repeats)


def motif_regions(codes: np.ndarray) -> list[Region]:
    """Up to two non-overlapping repeated motifs, in sequence order.

    The first found covers the most kernels; the second is searched among the
    remaining positions (a training step's backward mirrors its forward with a
    motif of another length).
    """
    allowed = np.ones(codes.size, bool)
    regions: list[Region] = []
    for _ in range(2):
        region = best_region(codes, allowed)
        if region is None:
            break
        regions.append(region)
        allowed[region.start : region.end] = False
    regions.sort(key=lambda r: r.start)
    if len(regions) == 2 and abs(regions[0].repeats - regions[1].repeats) > 1:
        return regions[:1] if regions[0].start == min(r.start for r in regions) else regions[1:]
    return regions


def nested_steps(codes: np.ndarray) -> Region | None:
    """A repeat of whole steps found without launch gaps: the largest repeated
    motif, when its own motif holds a repeated block over at least half of it
    (repeated forward passes of a model with repeated blocks)."""
    outer = best_region(codes, np.ones(codes.size, bool))
    if outer is None or outer.repeats < MIN_REPEATS:
        return None
    one = codes[outer.start : outer.start + outer.length]
    inner = best_region(one, np.ones(one.size, bool))
    if inner is None or inner.length * inner.repeats * 2 < one.size:
        return None
    return outer
