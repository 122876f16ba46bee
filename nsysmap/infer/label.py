"""Inferred step, phase and block of every operation, from the kernel sequence alone.

Pure: an OPS frame in, an INFERRED frame out (one row per op, keyed by
op_id). Ranges, steps, phases and modules the profile measured are never
read here and never overwritten; `nsysmap.infer.agree` compares the two.

Per device and process, the ops in execution order are hashed to integer
codes (one per distinct kernel name); `nsysmap.infer.motif` finds the step
period and, once per distinct step, its repeated block motifs. The Python
loops run over sequences and over distinct steps, never over kernels.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import polars as pl

from instrument.phase_vocabulary import INFERRED_PHASES
from nsysmap.infer.motif import Region, motif_regions, nested_steps, step_period
from nsysmap.schemas import INFERRED

# forward, backward, optimizer, data, other (instrument/phase_vocabulary.py)
PHASES = INFERRED_PHASES
_FWD, _BWD, _OPT, _DATA, _OTHER = range(len(PHASES))


@dataclass(frozen=True)
class Found:
    """What was found in one sequence (device and process), for the summary line."""

    device_id: int | None  # null where the export lacks a device id
    steps: int
    period: int | None  # kernels per step when the sequence repeats
    regions: tuple[Region, ...]  # in the most common step


def infer(ops: pl.DataFrame) -> tuple[pl.DataFrame, list[Found]]:
    """INFERRED rows for every op, and what was found per sequence."""
    seq = _sequences(ops)
    frames, found = [], []
    for _, part in seq.group_by(["device_id", "pid"], maintain_order=True):
        frame, what = _label_sequence(part)
        frames.append(frame)
        found.append(what)
    if not frames:
        return pl.DataFrame(schema=INFERRED), []
    return pl.concat(frames).select(INFERRED.names()).cast(INFERRED), found


def _sequences(ops: pl.DataFrame) -> pl.DataFrame:
    by = ["device_id", "pid"]
    return (
        ops.select(
            "op_id",
            "device_id",
            "pid",
            "stream_id",
            "kind",
            "category",
            "name",
            "start_ns",
            "end_ns",
        )
        .with_columns(
            pl.col("pid").fill_null(-1),
            pl.col("stream_id").fill_null(-1),
            order_ns=pl.coalesce(ops["launch_start_ns"], ops["start_ns"]),
        )
        .sort([*by, "order_ns", "op_id"])
        .with_columns(
            code=pl.col("name").fill_null("").rank("dense").cast(pl.Int64),
            gap_ns=(pl.col("order_ns") - pl.col("order_ns").shift(1).over(by))
            .clip(lower_bound=0)
            .fill_null(0),
        )
    )


def _label_sequence(seq: pl.DataFrame) -> tuple[pl.DataFrame, Found]:
    codes, gaps = seq["code"].to_numpy(), seq["gap_ns"].to_numpy()
    periodic = step_period(codes, gaps)
    steps = _steps(codes, gaps, periodic)
    special = _special_phases(seq)
    # Blocks are read on the stream with most kernels; others follow it in launch order.
    main = (seq["stream_id"] == seq["stream_id"].mode().sort()[0]).to_numpy()
    phase = np.full(codes.size, _OTHER, np.int64)
    block = np.full(codes.size, -1, np.int64)
    part = np.full(codes.size, -1, np.int64)
    bounds = np.flatnonzero(np.diff(np.concatenate(([-1], steps, [steps[-1] + 1]))))
    labelled: dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray, tuple[Region, ...]]] = {}
    counts: dict[bytes, int] = {}
    for lo, hi in itertools.pairwise(bounds):
        key = codes[lo:hi].tobytes() + special[lo:hi].tobytes() + main[lo:hi].tobytes()
        if key not in labelled:
            labelled[key] = _label_step(codes[lo:hi], special[lo:hi], main[lo:hi])
        counts[key] = counts.get(key, 0) + 1
        phase[lo:hi], block[lo:hi], part[lo:hi], _ = labelled[key]
    modal = labelled[max(counts, key=counts.__getitem__)][3]
    confidence = _confidence(codes, steps, block, periodic[0] if periodic else None)
    frame = seq.select("op_id", "device_id").with_columns(
        inferred_step=pl.Series(steps),
        inferred_phase=pl.Series(np.array(PHASES)[phase]),
        inferred_block=pl.Series(block).replace(-1, None),
        inferred_part=pl.Series(part).replace(-1, None),
        inferred_confidence=pl.Series(confidence[steps]),
    )
    n_steps = int(steps[-1]) + 1
    what = Found(seq["device_id"][0], n_steps, periodic[0] if periodic else None, modal)
    return frame, what


def _steps(
    codes: np.ndarray, gaps: np.ndarray, periodic: tuple[int, int, float, float] | None
) -> np.ndarray:
    """Step index per position: a step starts at the anchor kernel after a long gap.

    Steps of slightly different lengths still split where they should: a
    boundary is any occurrence of the anchor after a launch gap at least half
    the median gap before the anchor's occurrences.
    """
    if periodic is None:
        return _nested(codes)
    _, anchor, _, least_gap = periodic
    starts = (codes == anchor) & (gaps >= 0.5 * least_gap)
    starts[0] = False
    return np.cumsum(starts).astype(np.int64)


def _nested(codes: np.ndarray) -> np.ndarray:
    """Steps as the repeats of the largest motif that itself holds blocks (else one step)."""
    outer = nested_steps(codes)
    if outer is None:
        return np.zeros(codes.size, np.int64)
    bounds = outer.start + outer.length * np.arange(1 if outer.start == 0 else 0, outer.repeats + 1)
    return np.searchsorted(bounds, np.arange(codes.size), side="right").astype(np.int64)


def _special_phases(seq: pl.DataFrame) -> np.ndarray:
    """Phases known from the op itself: optimizer kernels, copies and fills (data)."""
    return (
        seq.select(
            pl.when(pl.col("category") == "optimizer")
            .then(_OPT)
            .when(pl.col("kind").cast(pl.String).is_in(["memcpy", "memset"]))
            .then(_DATA)
            .otherwise(-1)
        )
        .to_series()
        .to_numpy()
        .astype(np.int64)
    )


def _label_step(
    codes: np.ndarray, special: np.ndarray, main: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[Region, ...]]:
    """Phase, block and part per position of one step (blocks on the main stream only)."""
    on_main = np.flatnonzero(main)
    phase_main, block_main, part_main, regions = _label_main(codes[on_main])
    # Every position takes the phase of the last main-stream kernel launched before it.
    last = np.maximum.accumulate(np.where(main, np.cumsum(main) - 1, -1)).clip(min=0)
    phase = phase_main[last] if on_main.size else np.full(codes.size, _OTHER, np.int64)
    block, part = np.full(codes.size, -1, np.int64), np.full(codes.size, -1, np.int64)
    block[on_main], part[on_main] = block_main, part_main
    first = on_main[regions[0].start] if regions else codes.size
    pos = np.arange(codes.size)
    phase[(special == _DATA) & (pos < first)] = _DATA
    phase[special == _OPT] = _OPT
    return phase, block, part, regions


def _label_main(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[Region, ...]]:
    """Phase (forward, backward, other), block and part per position of one stream."""
    n = codes.size
    regions = tuple(motif_regions(codes))
    phase = np.full(n, _OTHER if not regions else _FWD, np.int64)
    block, part = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    pos = np.arange(n)
    for index, region in enumerate(regions):
        inside = (pos >= region.start) & (pos < region.end)
        rel = pos[inside] - region.start
        order = rel // region.length
        mirrored = index == 1  # the second motif of a step is its backward
        block[inside] = region.repeats - 1 - order if mirrored else order
        part[inside] = rel % region.length
    if len(regions) == 2:
        phase[pos >= (regions[0].end + regions[1].start) // 2] = _BWD
    return phase, block, part, regions


def _confidence(
    codes: np.ndarray, steps: np.ndarray, block: np.ndarray, period: int | None
) -> np.ndarray:
    """Per step: the share of its kernels explained by repetition.

    A kernel is explained when it lies in a repeated block, or equals the
    kernel one step period before or after it.
    """
    explained = block >= 0
    if period is not None and period < codes.size:
        same = codes[:-period] == codes[period:]
        explained[:-period] |= same
        explained[period:] |= same
    total = np.bincount(steps).astype(np.float64)
    return np.bincount(steps, weights=explained.astype(np.float64)) / np.maximum(total, 1.0)
