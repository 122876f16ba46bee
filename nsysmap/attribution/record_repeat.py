"""Work the GPU ran as the capture began, launched before it: its phase from the step it repeats.

A profile captured in the middle of training often opens with the tail of a
step launched before the capture began (a deep queue). Its operations have no
launch call, so PyTorch's records place them nowhere
(nsysmap.attribution.recorded_steps), yet training repeats its steps: that tail is,
kernel for kernel, captured work on the same stream. Per stream, the leading
operations without a launch call and still without a phase are set against
the captured operations just before a place where the work that follows them
(`ANCHOR` operations) recurs, or else before the stream's end where its last
operation is optimizer work (the capture ended at a step's end, as it began
at one). The first place whose kernel names agree for at least
`REPEAT_AGREEMENT` of them gives each its counterpart's phase (phase_source
"records"). Their step stays unknown: it is the step before the capture,
which the profile does not hold.

    stream 7, GPU order:  u1 u2 u3 | x y z ... a  b  c | x' y' z' ...
    x y z recur after a b c, and names(u1 u2 u3) == names(a b c):
    u1 u2 u3 take the phases of a b c
"""

from __future__ import annotations

import numpy as np
import polars as pl

# Share of the leading operations whose kernel name must equal their counterpart's.
REPEAT_AGREEMENT = 0.9
# Operations after the leading ones that must recur, in order, to fix where they repeat.
ANCHOR = 16
_STREAM = ["pid", "device_id", "stream_id"]


def from_repeated_step(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` (records' evidence with `record_step`, `record_phase`) with the
    record phase of each stream's leading unlaunched, unlabelled operations taken
    from the captured step they repeat, where one does."""
    phase = pl.coalesce("range_phase", "record_phase")
    if not frame.select((~pl.col("launched") & phase.is_null()).any()).item():
        return frame
    rows = (
        frame.select(
            *_STREAM,
            "start_ns",
            "name",
            "launched",
            row=pl.int_range(pl.len(), dtype=pl.UInt32),
            step=pl.coalesce("range_step", "record_step"),
            phase=phase,
        )
        .sort([*_STREAM, "start_ns", "row"])
        .with_columns(lead=(pl.col("launched").cum_sum().over(_STREAM) == 0))
    )
    found = [
        taken
        for _, stream in rows.group_by(_STREAM, maintain_order=True)
        if (taken := _taken(stream)) is not None
    ]
    if not found:
        return frame
    taken = pl.concat(found)
    repeat = pl.repeat(None, frame.height, dtype=pl.String, eager=True)
    repeat = repeat.scatter(taken["row"], taken["phase"])
    return frame.with_columns(record_phase=pl.coalesce(pl.col("record_phase"), repeat))


def _taken(stream: pl.DataFrame) -> pl.DataFrame | None:
    """Rows and phases for the leading unlabelled operations of one stream (GPU
    order), from the captured work they repeat."""
    lead = stream["lead"].to_numpy()
    n = int(lead.sum())
    if n == 0 or stream["phase"].filter(stream["lead"]).is_not_null().any():
        return None  # some leading work already has a phase: no clean tail to match
    codes = stream["name"].fill_null("").rank("dense").to_numpy()
    at = repeated_at(codes[:n], codes[n:], stream["phase"][-1] == "optimizer")
    if at is None:
        return None
    phases = stream["phase"].slice(n + at, n)  # rest begins at n
    return pl.DataFrame({"row": stream["row"].slice(0, n), "phase": phases})


def repeated_at(head: np.ndarray, rest: np.ndarray, ends_a_step: bool) -> int | None:
    """Where in `rest` (codes of the captured work that follows them) the leading codes
    `head` repeat: the first place p (head's counterpart is rest[p - len(head) : p]) at
    which the `ANCHOR` codes that follow `head` recur, or `rest`'s end when
    `ends_a_step` (the capture ended at a step's end, as it began at one), whose
    preceding codes equal `head` for at least `REPEAT_AGREEMENT` of them. Returned
    as the counterpart's first position in `rest` (p - len(head)); None where none
    does."""
    n = head.size
    anchor = min(ANCHOR, rest.size)
    at = np.flatnonzero(rest == rest[0]) if anchor else np.empty(0, np.int64)
    at = at[(at >= n) & (at + anchor <= rest.size)]
    for i in range(anchor):  # the codes after the leading ones recur at `at`
        at = at[rest[at + i] == rest[i]]
    places = [*at.tolist(), rest.size] if ends_a_step else at.tolist()
    for p in places:
        if n <= p and np.mean(rest[p - n : p] == head) >= REPEAT_AGREEMENT:
            return int(p) - n
    return None
