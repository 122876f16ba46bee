"""Inferred pass, phase and block of every operation, from the kernel sequence alone.

Pure: an OPS frame in, an INFERRED frame out (one row per op, keyed by
op_id). Ranges, steps, phases and modules the profile measured are never
read here and never overwritten; `nsysmap.infer.summary` compares the two.

Per device and process, the ops in execution order get one integer code per
normalised kernel key (`KEY`: the category for GEMMs, attention and
convolutions, whose kernel the library picks per shape; else the short name
with its digits dropped); `nsysmap.infer.repeats` splits the sequence into
passes and `nsysmap.infer.motif` finds, once per distinct pass, its
repeated block motifs. The Python loops run over sequences, candidate lags
and distinct passes, never over kernels.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import polars as pl

from nsysmap.core.inferred_schemas import INFERRED
from nsysmap.infer.motif import Region, block_index, motif_regions, recurs
from nsysmap.infer.repeats import Evidence, passes
from nsysmap.infer.sequence import PHASES, parts, sequence_query, sequences
from nsysmap.infer.threads import (
    after_autograd,
    autograd_start,
    backward_evidence,
    layers,
    other_thread,
    repeated_work,
)

_FWD, _BWD, _OPT, _DATA, _OTHER = range(len(PHASES))
# Where an op lies in its pass: before its first block, in one, between the forward
# and the backward blocks (head, loss), after the last block (final projection, optimizer).
REGIONS = ("prefix", "block", "between", "suffix")
_PREFIX, _BLOCK, _BETWEEN, _SUFFIX = range(len(REGIONS))


@dataclass(frozen=True)
class Found:
    """What was found in one sequence (device and process), for the summary line."""

    device_id: int | None  # null where the export lacks a device id
    steps: int  # passes found
    period: int | None  # kernels per step when host gaps mark the steps
    regions: tuple[Region, ...]  # in the most common pass
    backward: bool = False  # a mirrored motif with backward evidence was found
    confidence: float = 0.0  # share of the sequence's kernels explained by repetition
    network: bool = True  # a neural network's kernels (else repeats are no forward pass)
    copies: tuple[bool, ...] = ()  # per region: its motif holds a copy or a memset


@dataclass(frozen=True)
class _Pass:
    phase: np.ndarray
    block: np.ndarray
    part: np.ndarray
    region: np.ndarray
    explained: np.ndarray  # the kernel recurs one motif length away
    regions: tuple[Region, ...]
    backward: bool
    copies: tuple[bool, ...] = ()  # per region: its motif holds a copy or a memset


def infer(ops: pl.DataFrame) -> tuple[pl.DataFrame, list[Found]]:
    """INFERRED rows for every op of an OPS frame, and what was found per sequence."""
    return infer_sequences(sequence_query(ops.lazy()).collect())


def infer_sequences(frame: pl.DataFrame) -> tuple[pl.DataFrame, list[Found]]:
    """INFERRED rows for every op of a `sequence_query` frame, and what was found per
    sequence (device and process)."""
    frames, found = [], []
    for part in parts(sequences(frame)):
        labelled, what = _label_sequence(part)
        frames.append(labelled)
        found.append(what)
    if not frames:
        return pl.DataFrame(schema=INFERRED), []
    return pl.concat(frames).select(INFERRED.names()).cast(INFERRED), found


def _label_sequence(seq: pl.DataFrame) -> tuple[pl.DataFrame, Found]:
    codes = seq["code"].to_numpy()
    # Passes and blocks are read on the stream with most kernels; others follow it in
    # launch order.
    main = (seq["stream_id"] == seq["stream_id"].mode().sort()[0]).to_numpy()
    on_main = np.flatnonzero(main)
    order = seq["order_ns"].to_numpy()[on_main]
    special = seq["special"].to_numpy().astype(np.int64)
    backish = seq["backish"].to_numpy()
    layer = seq["layer"].to_numpy()
    gaps = np.diff(order, prepend=order[:1])
    network = bool(seq["network"].any())
    tid = seq["tid"].fill_null(-1).to_numpy()
    unlaunched = tid < 0  # launched before the capture: no launching thread
    seen = _evidence(seq, special, on_main, network, unlaunched)
    steps_main, period = passes(codes[on_main], gaps, seen)
    last = np.maximum.accumulate(np.where(main, np.cumsum(main) - 1, -1)).clip(min=0)
    steps = steps_main[last]
    n = codes.size
    phase, block, part = (np.full(n, v, np.int64) for v in (_OTHER, -1, -1))
    region, explained = np.full(n, -1, np.int64), np.zeros(n, bool)
    bounds = np.flatnonzero(np.diff(np.concatenate(([-1], steps, [steps[-1] + 1]))))
    labelled: dict[bytes, _Pass] = {}
    counts: dict[bytes, int] = {}
    backward = False
    for lo, hi in itertools.pairwise(bounds):
        parts: tuple[np.ndarray, ...] = (codes[lo:hi], special[lo:hi], main[lo:hi])
        parts += (backish[lo:hi], other_thread(tid[lo:hi]), unlaunched[lo:hi], layer[lo:hi])
        key = b"|".join(a.tobytes() for a in parts)
        if key not in labelled:
            labelled[key] = _label_pass(*parts)
        counts[key] = counts.get(key, 0) + 1
        done = labelled[key]
        phase[lo:hi], block[lo:hi], part[lo:hi] = done.phase, done.block, done.part
        region[lo:hi], explained[lo:hi] = done.region, done.explained
        backward |= done.backward
    repeated_work(phase, codes, unlaunched, seq["stream_id"].to_numpy())
    modal_pass = labelled[max(counts, key=counts.__getitem__)]
    modal = modal_pass.regions
    confidence = _confidence(codes, steps, block, explained)
    if not network:  # repeats, but of no forward pass
        phase[phase == _FWD] = _OTHER
    frame = seq.select("op_id", "device_id").with_columns(
        inferred_step=pl.Series(steps),
        inferred_phase=_named(phase, PHASES),
        inferred_region=_named(region, REGIONS),
        inferred_block=pl.Series(block).replace(-1, None),
        inferred_part=pl.Series(part).replace(-1, None),
        inferred_confidence=pl.Series(confidence),
    )
    sure = float(confidence.mean()) if n else 0.0
    device = seq["device_id"][0]
    what = Found(
        device, int(steps[-1]) + 1, period, modal, backward, sure, network, modal_pass.copies
    )
    return frame, what


def _named(index: np.ndarray, names: tuple[str, ...]) -> pl.Series:
    """Names by index (-1: null), made by Polars (faster than NumPy string arrays)."""
    return pl.Series(index).replace_strict(
        dict(enumerate(names)), default=None, return_dtype=pl.String
    )


def _evidence(
    seq: pl.DataFrame,
    special: np.ndarray,
    on_main: np.ndarray,
    network: bool,
    unlaunched: np.ndarray,
) -> Evidence:
    """What the main stream's ops say about passes beyond their codes."""
    data = special[on_main] == _DATA
    return Evidence(
        special[on_main] == _OPT,
        _synced(seq, on_main),
        data if network else None,
        unlaunched[on_main],
    )


def _synced(seq: pl.DataFrame, on_main: np.ndarray) -> np.ndarray:
    """Per main-stream kernel: whether a host-device copy was launched since the
    previous main-stream kernel (that one included, this one not)."""
    count = np.concatenate(([0], np.cumsum(seq["host_copy"].to_numpy())))
    since = count[on_main] - count[np.concatenate(([0], on_main[:-1]))]
    synced: np.ndarray = since > 0
    return synced


def _label_pass(
    codes: np.ndarray,
    special: np.ndarray,
    main: np.ndarray,
    backish: np.ndarray,
    other: np.ndarray,
    unlaunched: np.ndarray,
    layer: np.ndarray,
) -> _Pass:
    """Phase, block, part, region and repetition per position of one pass."""
    on_main = np.flatnonzero(main)
    found = _label_main(
        codes[on_main],
        backish[on_main],
        other[on_main],
        special[on_main],
        unlaunched[on_main],
        layer[on_main],
    )
    # Every position takes the phase and region of the last main-stream kernel before it.
    last = np.maximum.accumulate(np.where(main, np.cumsum(main) - 1, -1)).clip(min=0)
    n = codes.size
    phase = found.phase[last] if on_main.size else np.full(n, _OTHER, np.int64)
    region = found.region[last] if on_main.size else np.full(n, -1, np.int64)
    region = np.where(region == _BLOCK, _BETWEEN if found.backward else _SUFFIX, region)
    block, part = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    explained = np.zeros(n, bool)
    block[on_main], part[on_main], explained[on_main] = found.block, found.part, found.explained
    region[on_main] = found.region
    first = on_main[found.regions[0].start] if found.regions else n
    backward = np.flatnonzero(phase == _BWD)
    first = min(first, int(backward[0])) if backward.size else first  # no data in backward
    pos = np.arange(n)
    phase[(special == _DATA) & (pos < first)] = _DATA
    phase[special == _OPT] = _OPT
    data = special[on_main] == _DATA
    copies = tuple(bool(data[r.start : r.start + r.length].any()) for r in found.regions)
    return _Pass(phase, block, part, region, explained, found.regions, found.backward, copies)


def _label_main(
    codes: np.ndarray,
    backish: np.ndarray,
    other: np.ndarray,
    special: np.ndarray,
    unlaunched: np.ndarray,
    layer: np.ndarray,
) -> _Pass:
    """Phase (forward, backward, other), block, part and region per position of one stream."""
    n = codes.size
    # A block is launched by one thread: the same kernel launched by autograd's thread is
    # another (a forward motif never runs on into the backward pass).
    after = after_autograd(other)
    motifs = tuple(motif_regions(codes * 2 + other))
    regions = layers(motifs, other, unlaunched, layer, after)
    backward = len(regions) == 2 and backward_evidence(regions[1], backish, other, special)
    if len(regions) == 2 and not backward:
        regions = regions[:1]  # no evidence of a backward pass: no invented one
    phase = np.full(n, _OTHER if not regions else _FWD, np.int64)
    block, part, explained = np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.zeros(n, bool)
    region = np.full(n, -1, np.int64)
    pos = np.arange(n)
    for index, found in enumerate(regions):
        inside = (pos >= found.start) & (pos < found.end)
        order, where = block_index(found, pos[inside])
        block[inside] = found.repeats - 1 - order if index == 1 else order
        part[inside] = where
        lag = found.length
        span = codes[found.start : found.end]
        if span.size > lag:
            hit = recurs(span, lag)
            both = np.zeros(span.size, bool)
            both[:-lag] |= hit
            both[lag:] |= hit
            explained[inside] = both
    if regions:
        region[pos < regions[0].start] = _PREFIX
        region[pos >= regions[-1].end] = _SUFFIX
        region[(pos >= regions[0].end) & (pos < regions[-1].start)] = _BETWEEN
        region[block >= 0] = _BLOCK
    if backward:
        phase[pos >= (regions[0].end + regions[1].start) // 2] = _BWD
    elif (start := autograd_start(other[:after], special[:after])) is not None:
        # No mirrored motif, but autograd's thread launches the rest: backward from there.
        backward = True
        phase[pos < start], phase[pos >= start] = _FWD, _BWD
    if backward:
        phase[(pos >= after) & (phase == _BWD)] = _OPT  # the main thread's again: optimizer
    return _Pass(phase, block, part, region, explained, regions, backward)


def _confidence(
    codes: np.ndarray, steps: np.ndarray, block: np.ndarray, explained: np.ndarray
) -> np.ndarray:
    """Per op: in a block, the share of the block's kernels that recur one motif away;
    elsewhere, the share of its pass's kernels that lie in such blocks or recur one
    (median) pass length away."""
    n = codes.size
    passes = int(steps[-1]) + 1
    across = np.zeros(n, bool)
    period = int(np.median(np.bincount(steps))) if passes > 1 else 0
    if 0 < period < n:
        hit = recurs(codes, period)
        across[:-period] |= hit
        across[period:] |= hit
    whole = (block >= 0) & explained | across
    per_pass = np.bincount(steps, weights=whole.astype(np.float64)) / np.maximum(
        np.bincount(steps), 1
    )
    # A layer's forward and backward blocks in one pass count as one.
    key = np.where(block >= 0, steps * (int(block.max()) + 2) + block, -1)
    inverse = _dense(key)
    sums = np.bincount(inverse, weights=explained.astype(np.float64))
    per_block = sums / np.maximum(np.bincount(inverse), 1)
    confidence: np.ndarray = np.where(key >= 0, per_block[inverse], per_pass[steps])
    return confidence


def _dense(key: np.ndarray) -> np.ndarray:
    """A bin per distinct value of `key` (-1 and up), for `np.bincount`: the key
    itself, shifted, when its values are few enough to count directly (a pass
    and block per op, about n bins at most), else their ranks. The bins' sums
    are the same either way; sorting 5 million keys for their ranks took 1.5 s."""
    if key.size and int(key.max()) < 4 * key.size + 1024:
        return key + 1
    inverse: np.ndarray = np.unique(key, return_inverse=True)[1]
    return inverse
