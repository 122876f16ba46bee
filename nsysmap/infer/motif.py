"""Periodicity in a sequence of integer kernel codes (pure NumPy, no per-kernel loop).

Two questions about a sequence `codes` (normalised kernel keys hashed to
integers, in execution order):

* `step_period` (nsysmap.infer.period, built on the lag scores here): the lag
  P at which the whole sequence repeats (a training step or an inference
  batch) with a long launch gap before each repeat, and the code that starts
  each period.
* `stacks` / `motif_regions`: the stretches where a motif of B kernels
  repeats back to back (the blocks of a transformer's forward, and the
  mirrored blocks of its backward), allowing a few inserted or dropped
  kernels: kernel i matches when its code recurs B kernels later within
  MATCH_WINDOW kernels, and short breaks in a run of matches are bridged.

Candidate lags are the most common gaps between repeats of the same code;
each candidate is scored with a few vectorised comparisons of the sequence
with itself shifted by the lag, so the cost is O(n x candidates).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_CANDIDATES = 48
# Candidate block lags are gaps between a code and its next this many repeats.
NEXT_REPEATS = 3
# A lag is a step period when this share of kernels equals the kernel one lag later.
MIN_PERIOD_SCORE = 0.5
MIN_REPEATS = 2
# A block motif has at least this many kernels (one kernel repeated is no block).
MIN_MOTIF = 2
# Kernels by which two repeats of a step may be out of line (inserted or missing kernels).
PERIOD_WINDOW = 2
# The same for two neighbouring blocks, and the longest break bridged in a run of matches.
MATCH_WINDOW = 2
BRIDGE = 3
# A match one or two kernels out of line counts inside a run of this many such matches,
# and a run of matches needs this share of them exactly in line.
ALIGNED_RUN = 4
IN_LINE = 0.3
# The block motif is the shortest lag covering this share of what the best lag covers
# (a whole pass repeated covers a little more than its blocks do).
COVER_SHARE = 0.8


@dataclass(frozen=True)
class Region:
    """`repeats` copies of a motif of `length` kernels from `start` to `end` (exclusive).

    With inserted or dropped kernels, `end - start` differs a little from
    `length * repeats`; blocks are spread evenly over the span.
    """

    start: int
    length: int
    repeats: int
    stop: int = -1  # the end when it differs from start + length * repeats

    @property
    def end(self) -> int:
        return self.stop if self.stop >= 0 else self.start + self.length * self.repeats


def candidate_lags(codes: np.ndarray, limit: int, next_repeats: int = 1) -> np.ndarray:
    """Lags (<= limit) that separate repeats of a code, the most common first.

    The most common gaps overall, and each code's own most common gap (a
    kernel launched once per step repeats at the step period, however rare).
    """
    if codes.size < 2 or limit < 1:
        return np.empty(0, np.int64)
    order = np.lexsort((np.arange(codes.size), codes))
    sorted_codes = codes[order]
    # Gaps to the next three repeats of a code: a code launched two or three times per
    # block recurs one block later only at its second or third next launch.
    gaps_list, owner_list = [], []
    for k in range(1, next_repeats + 1):
        same = sorted_codes[k:] == sorted_codes[:-k]
        gaps_list.append((order[k:] - order[:-k])[same])
        owner_list.append(sorted_codes[k:][same])
    gaps, owner = np.concatenate(gaps_list), np.concatenate(owner_list)
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
    modal = pair_gap[by_code][first][: MAX_CANDIDATES * 2]
    lags, seen = np.unique(np.concatenate([common, modal]), return_index=True)
    return lags[np.argsort(seen)].astype(np.int64)


def lag_score(codes: np.ndarray, lag: int, window: int = 0, chance: float | None = None) -> float:
    """Share of positions whose code recurs `lag` (+- `window`) positions later.

    The window tolerates a few kernels inserted or missing between two
    repeats; the score is scaled so that chance matches give 0 and a perfect
    repeat 1. `chance`: `chance_matches(codes, window)`, when the caller scores
    many lags of the same codes.
    """
    n = codes.size
    w = window
    if not w < lag < n - 2 * w:
        return 0.0
    head = codes[w : n - lag - w]
    hit = np.zeros(head.size, bool)
    for d in range(-w, w + 1):
        hit |= head == codes[w + lag + d : n - w + d]
    if chance is None:
        chance = chance_matches(codes, window)
    return (float(np.mean(hit)) - chance) / (1.0 - chance)


def chance_matches(codes: np.ndarray, window: int) -> float:
    """The share of positions `lag_score` finds a match at by chance."""
    freq = np.bincount(codes - codes.min()) / codes.size
    return min(0.99, float(np.sum(freq**2)) * (2 * window + 1))


def narrowed(codes: np.ndarray) -> np.ndarray:
    """`codes` (integers) in the smallest signed integer type that holds them: the period
    search reads every code at each of up to a hundred lags, 4.3x faster over 5 million
    codes as int16 than as int64. Equal codes stay equal: every answer is the same."""
    if codes.size == 0 or codes.dtype.kind not in "iu":
        return codes
    low, high = int(codes.min()), int(codes.max())
    for dtype in (np.int16, np.int32):
        bounds = np.iinfo(dtype)
        if bounds.min <= low and high <= bounds.max:
            return codes.astype(dtype)
    return codes


def recurs(codes: np.ndarray, lag: int, window: int = MATCH_WINDOW) -> np.ndarray:
    """For i < n - lag: whether codes[i] recurs at i + lag (+- window)."""
    n = codes.size
    hit: np.ndarray = codes[: n - lag] == codes[lag:]
    for d in range(1, window + 1):
        hit[: n - lag - d] |= codes[: n - lag - d] == codes[lag + d :]
        hit[d:] |= codes[d : n - lag] == codes[lag : n - d]
    return hit


def aligned(codes: np.ndarray, lag: int, window: int) -> np.ndarray:
    """Like `recurs`, but a match at lag + d counts only inside a run of at least
    ALIGNED_RUN such matches at the same d (an inserted kernel shifts what follows
    by one; a low-entropy stream matches a kernel or two at any lag by chance)."""
    n = codes.size
    hit: np.ndarray = codes[: n - lag] == codes[lag:]
    for d in (d for k in range(1, window + 1) for d in (k, -k)):
        lo, hi = max(0, -d), min(n - lag, n - lag - d)
        same = codes[lo:hi] == codes[lo + lag + d : hi + lag + d]
        starts, ends = runs(same, 0)
        long = ends - starts >= ALIGNED_RUN
        mark = np.zeros(same.size + 1, np.int64)
        np.add.at(mark, starts[long], 1)
        np.add.at(mark, ends[long], -1)
        hit[lo:hi] |= np.cumsum(mark[:-1]) > 0
    return hit


def runs(match: np.ndarray, bridge: int = BRIDGE) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the runs of True, breaks of up to `bridge` False bridged."""
    edges = np.diff(np.concatenate(([0], match.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if starts.size > 1:
        keep = np.concatenate(([True], starts[1:] - ends[:-1] > bridge))
        starts, ends = starts[keep], ends[np.concatenate((keep[1:], [True]))]
    return starts, ends


def stacks(codes: np.ndarray, lag: int, allowed: np.ndarray, tolerant: bool = True) -> list[Region]:
    """Every stretch where a motif of `lag` kernels repeats at least MIN_REPEATS times.

    A run of R matches at lag B covers R + B kernels: L = (R + B) // B
    repeats (with `tolerant`, the median count in the stretch of the codes
    found once in one copy), and the kernels left over are split evenly before and after
    them (the context around a stack of blocks tends to resemble both its
    first and its last block). `tolerant`: a kernel matches within
    MATCH_WINDOW and breaks of up to BRIDGE kernels are bridged (motifs of
    under ten kernels get no slack: it would match them by chance).
    """
    if not MIN_MOTIF <= lag < codes.size:
        return []
    slack = min(MATCH_WINDOW, lag // 10) if tolerant else 0
    match = aligned(codes, lag, slack) & allowed[:-lag] & allowed[lag:]
    starts, ends = runs(match, min(BRIDGE, lag // 10) if tolerant else 0)
    if tolerant and starts.size:
        # Mostly in line: a motif of B + 2 kernels matches at B with every kernel out by two.
        exact = np.concatenate(([0], np.cumsum(codes[:-lag] == codes[lag:])))
        line = (exact[ends] - exact[starts]) >= IN_LINE * (ends - starts)
        starts, ends = starts[line], ends[line]
    covered = ends - starts + lag
    repeats = covered // lag
    keep = (repeats >= MIN_REPEATS) | (tolerant & (covered >= MIN_REPEATS * lag - lag // 4))
    found = []
    for s, c, r in zip(starts[keep], covered[keep], repeats[keep], strict=True):
        if np.unique(codes[s : s + lag]).size < MIN_MOTIF:
            continue  # one kernel launched over and over is no block
        if tolerant:  # inserted and dropped kernels change the length: count the motif
            r = _copies(codes[s : s + c], lag, int(r))
        if c < r * lag:  # the run stopped inside the first or the last block
            found.append(_whole(codes, int(s), int(c), int(r), lag, slack))
            continue
        left = int(c - r * lag)
        found.append(Region(int(s) + left // 2, lag, int(r), int(s + c) - (left - left // 2)))
    return found


def _whole(codes: np.ndarray, s: int, c: int, r: int, lag: int, slack: int) -> Region:
    """A stack of r blocks whose run of matches covered only c < r * lag kernels from s:
    extended before or after, whichever side repeats its neighbouring block better."""
    need, n = r * lag - c, codes.size
    lo, hi = max(s - need, 0), min(s + c + need, n)
    before = _similar(codes, np.arange(lo, s), lag, slack)
    after = _similar(codes, np.arange(s + c, hi), -lag, slack)
    if before > after:
        return Region(lo, lag, r, s + c)
    return Region(s, lag, r, hi)


def _similar(codes: np.ndarray, pos: np.ndarray, lag: int, slack: int) -> float:
    """Share of the positions whose code recurs `lag` (+- slack) away (0 for none)."""
    if pos.size == 0:
        return 0.0
    hit = np.zeros(pos.size, bool)
    for d in range(-slack, slack + 1):
        other = pos + lag + d
        inside = (other >= 0) & (other < codes.size)
        hit |= inside & (codes[pos] == codes[np.clip(other, 0, codes.size - 1)])
    return float(hit.mean())


def _copies(span: np.ndarray, lag: int, guess: int) -> int:
    """How many copies of the motif (span's first `lag` kernels) the span holds: the
    median count of the codes found once in one copy, the guess (the floor of the span
    over the lag) or one more."""
    low = int(span.min())
    once = np.flatnonzero(np.bincount(span[:lag] - low) == 1)
    if once.size == 0:
        return guess
    counts = np.bincount(span - low, minlength=once.max() + 1)[once]
    # Dropped kernels cost the floor at most the last block.
    return int(np.clip(np.median(counts), max(guess, MIN_REPEATS), guess + 1))


def coverage(found: list[Region]) -> int:
    return sum(r.end - r.start for r in found)


def block_lag(codes: np.ndarray, allowed: np.ndarray, whole: bool = True) -> int | None:
    """The block motif's length: the shortest lag whose exact repeats cover COVER_SHARE
    of the most any lag covers (a repeated pass covers a little more than its blocks).

    `whole`: what all stacks of exact repeats cover (passes of blocks); else what the
    largest stack found with inserted and dropped kernels tolerated covers in line
    (within one pass, where scattered short repeats are no blocks)."""
    masked = np.where(allowed, codes, -1 - np.arange(codes.size))
    lags = candidate_lags(masked, codes.size // MIN_REPEATS, NEXT_REPEATS)
    lags = np.sort(lags[lags >= MIN_MOTIF])
    if whole:
        covers = np.array([coverage(stacks(masked, int(lag), allowed, False)) for lag in lags])
    else:
        covers = np.array([_in_line(masked, int(lag), allowed) for lag in lags])
    if not covers.size or covers.max() == 0:
        return None
    return int(lags[np.argmax(covers >= COVER_SHARE * covers.max())])


def _in_line(codes: np.ndarray, lag: int, allowed: np.ndarray) -> int:
    """Kernels of the lag's largest tolerant stack that equal the kernel one lag on, plus
    the lag (what an exact stack of the same kernels would cover)."""
    found = stacks(codes, lag, allowed, True)
    if not found:
        return 0
    top = max(found, key=lambda r: r.end - r.start)
    span = codes[top.start : top.end]
    return int(np.sum(span[:-lag] == span[lag:])) + lag if span.size > lag else 0


def best_stacks(
    codes: np.ndarray, allowed: np.ndarray, tolerant: bool = True, whole: bool = True
) -> list[Region]:
    """The stacks of the block motif among the allowed positions."""
    lag = block_lag(codes, allowed, whole)
    if lag is None:
        return []
    masked = np.where(allowed, codes, -1 - np.arange(codes.size))
    return stacks(masked, lag, allowed, tolerant)


def motif_regions(codes: np.ndarray) -> list[Region]:
    """Up to two non-overlapping repeated motifs, in sequence order.

    The first is the largest stack of the block motif; the second is searched
    among the remaining positions (a training step's backward mirrors its
    forward with a motif of another length), and kept only with the same
    number of repeats, give or take one.
    """
    allowed = np.ones(codes.size, bool)
    regions: list[Region] = []
    for _ in range(2):
        found = best_stacks(codes, allowed, whole=False)
        if not found:
            break
        region = max(found, key=lambda r: (r.end - r.start, -r.start))
        regions.append(region)
        allowed[region.start : region.end] = False
    regions.sort(key=lambda r: r.start)
    if len(regions) == 2 and abs(regions[0].repeats - regions[1].repeats) > 1:
        return [max(regions, key=lambda r: r.end - r.start)]
    return regions


def block_index(region: Region, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(repeat, position in the motif) of positions inside the region, spread evenly."""
    scale = (region.end - region.start) / region.repeats
    rel = pos - region.start
    order = np.minimum((rel / scale).astype(np.int64), region.repeats - 1)
    part = np.clip(np.round(rel - order * scale).astype(np.int64), 0, region.length - 1)
    return order, part
