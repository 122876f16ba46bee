"""The step period of a kernel sequence: where the whole sequence repeats after a long
launch gap (pure NumPy).

`step_period` proposes lags from the motif scores (nsysmap.infer.motif:
`candidate_lags`) and from the distances between the longest launch gaps,
scores each by how much of the sequence recurs one lag later, and keeps the
smallest of the best whose longest gaps, one per period, lie a period apart
and are clearly longer than the typical gap (steps are separated by host
work; blocks inside a step are not). The longest gaps are found by
`longest_first`, which sorts only as many as the shortest lag asks for.
"""

from __future__ import annotations

import numpy as np

from nsysmap.infer.motif import (
    MIN_PERIOD_SCORE,
    PERIOD_WINDOW,
    candidate_lags,
    chance_matches,
    lag_score,
    narrowed,
)

# Lags whose score is this close to the best count as equally good (the smallest wins).
SCORE_TIE = 0.005
# A step boundary must be an idle gap this many times the typical gap between kernels.
MIN_BOUNDARY_GAP_RATIO = 20.0
# How many of the longest launch gaps propose step periods.
GAP_CANDIDATES = 64


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
    codes = narrowed(codes)  # every lag's score reads every code again
    top = longest_first(gaps_ns, GAP_CANDIDATES)
    lags = np.union1d(candidate_lags(codes, codes.size // 2), _gap_lags(gaps_ns, top))
    lags = lags[lags > PERIOD_WINDOW]
    # Two passes of unequal length: the first may be a little over half of them.
    found = _period(codes, gaps_ns, lags[lags <= codes.size // 2])
    return found or _period(codes, gaps_ns, lags[lags <= 2 * codes.size // 3])


def longest_first(gaps_ns: np.ndarray, k: int) -> np.ndarray:
    """The positions of the `k` longest gaps (integers, or floats without NaN), longest
    first, equal ones in position order: the first `k` of a stable sort of every gap,
    longest first, without sorting them all
    (a partition finds the k-th longest; only the gaps at least as long are sorted)::

        gaps_ns   [5, 9, 1, 9, 7, 9]      k = 3  ->  [1, 3, 5]
                                          k = 4  ->  [1, 3, 5, 4]
    """
    order = -gaps_ns
    if k >= order.size:
        return np.argsort(order, kind="stable")
    if k <= 0:
        return np.empty(0, np.int64)
    kth = np.partition(order, k - 1)[k - 1]
    below = np.flatnonzero(order < kth)
    tied = np.flatnonzero(order == kth)[: k - below.size]
    chosen = np.sort(np.concatenate((below, tied)))  # position order, so that ties stay in it
    return chosen[np.argsort(order[chosen], kind="stable")]


def _period(
    codes: np.ndarray, gaps_ns: np.ndarray, lags: np.ndarray
) -> tuple[int, int, float, float] | None:
    if lags.size == 0:
        return None
    chance = chance_matches(codes, PERIOD_WINDOW)
    scores = np.array([lag_score(codes, int(k), PERIOD_WINDOW, chance) for k in lags])
    scored = [(int(lag), float(score)) for lag, score in zip(lags, scores, strict=True)]
    scored = [(lag, score) for lag, score in scored if score >= MIN_PERIOD_SCORE]
    if not scored:
        return None
    typical = max(float(np.median(gaps_ns[1:])), 1.0)
    # `_anchor` reads the codes.size // lag - 1 longest gaps after the first kernel, at most:
    # only those are sorted (one more, for the first kernel's).
    wanted = codes.size // min(lag for lag, _ in scored) + 1
    by_gap = longest_first(gaps_ns, wanted)
    by_gap = by_gap[by_gap > 0]  # the gaps after the first kernel, longest first
    passing = {}
    for lag, score in scored:
        anchor, least, spaced = _anchor(codes, gaps_ns, by_gap, lag)
        if spaced and least / typical >= MIN_BOUNDARY_GAP_RATIO:
            passing[lag] = (anchor, score, least)
    if not passing:
        return None
    best = max(score for _, score, _ in passing.values())
    period = min(lag for lag, (_, score, _) in passing.items() if score >= best - SCORE_TIE)
    return (period, *passing[period])


def _gap_lags(gaps_ns: np.ndarray, by_gap: np.ndarray) -> np.ndarray:
    """Distances between the longest launch gaps (where steps tend to start); `by_gap`:
    the positions, longest gap first (a stable sort)."""
    longest = np.sort(by_gap[:GAP_CANDIDATES])
    typical = max(float(np.median(gaps_ns)), 1.0)
    longest = longest[gaps_ns[longest] >= MIN_BOUNDARY_GAP_RATIO * typical]
    # From the start too: two passes have one gap between them.
    return np.unique(np.diff(np.concatenate(([0], longest)))).astype(np.int64)


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
