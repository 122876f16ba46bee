"""Links between trace events: backward operators to their forward operators, launches to GPU ops.

Flow events (`"ph": "s"` at the source, `"f"` at the target, same `id`)
bind to the event of their thread that starts at their time:

    main thread      |-- aten::addmm (Sequence number 4) --|
                     s id 17
    autograd thread                       |-- AddmmBackward0 --|
                                          f id 17

* `fwdbwd` flows tie a backward operator to the forward operator whose
  autograd node it runs. Without flows, the "Sequence number" argument does
  (a backward node records "Fwd thread id" > 0 and the sequence number of
  its forward operator). Linked operators become ranges named in PyTorch's
  emit_nvtx style, `aten::addmm, seq = 4` and `AddmmBackward0, stashed seq = 4`,
  which `nsysmap.attribution.locate` follows to give backward work the module
  of its forward operator. A flow decides over the arguments: its backward
  operator is backward and takes the sequence number of the flow's forward
  operator.
* `ac2g` (old traces: `async`) flows tie a launch call to its GPU operation;
  they supply the correlation id only where an event's args lack one.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from nsysmap.read.torch_columns import ids, ns_from_us

_KEYS = ["pid", "tid", "start_ns"]


def flow_frame(evs: list[dict[str, Any]]) -> pl.DataFrame:
    """ph, id, pid, tid, start_ns of checked flow events."""
    return pl.DataFrame(
        {
            "ph": pl.Series([e["ph"] for e in evs], dtype=pl.String),
            "id": pl.Series([e["id"] for e in evs], dtype=pl.Int64),
            "pid": ids([e["pid"] for e in evs]),
            "tid": ids([e["tid"] for e in evs]),
            "start_ns": ns_from_us([e["ts"] for e in evs]),
        }
    )


def _bound(frame: pl.DataFrame, flows: pl.DataFrame, ph: str) -> pl.DataFrame:
    """Flow id -> row of `frame` (`row`) for flows of phase `ph`.

    Of several events starting at the flow's time on its thread, the
    shortest (the innermost) is the one the flow binds to.
    """
    ends = flows.filter(pl.col("ph") == ph).select("id", *_KEYS)
    rows = frame.select(*_KEYS, "end_ns").with_row_index("row")
    joined = ends.join(rows, on=_KEYS, how="inner")
    return joined.sort("end_ns", "row").unique("id", keep="first").select("id", "row")


def link_operators(cpu: pl.DataFrame, flows: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """`cpu` with `seq` and `backward` settled by fwdbwd flows, and counts of the links.

    `cpu` has the operator columns (`_KEYS`, end_ns, seq, fwd_tid); `backward`
    is true for backward operators.
    """
    backward = (pl.col("fwd_tid").fill_null(0) > 0).alias("backward")
    out = cpu.with_columns(backward)
    if flows.is_empty():
        return out, {"fwdbwd_flows": 0, "fwdbwd_flows_unlinked": 0}
    fwd, bwd = _bound(cpu, flows, "s"), _bound(cpu, flows, "f")
    pairs = fwd.join(bwd, on="id", suffix="_bwd")
    pairs = pairs.with_columns(seq=cpu["seq"].gather(pairs["row"]))
    linked = pairs.filter(pl.col("seq").is_not_null())
    n_flows = flows["id"].n_unique()
    seq = out["seq"].scatter(linked["row_bwd"], linked["seq"])
    is_bwd = out["backward"].scatter(linked["row_bwd"], True).scatter(linked["row"], False)
    facts = {"fwdbwd_flows": linked.height, "fwdbwd_flows_unlinked": n_flows - linked.height}
    return out.with_columns(seq=seq, backward=is_bwd), facts


def autograd_ranges(cpu: pl.DataFrame) -> pl.DataFrame:
    """Operators as ranges named in PyTorch's emit_nvtx style, for autograd linking.

    A forward operator with a sequence number becomes `aten::addmm, seq = 4`;
    a backward one `..., stashed seq = 4`. Operators without a sequence
    number keep their plain name.
    """
    seq = pl.col("seq").cast(pl.String)
    name = (
        pl.when(pl.col("seq").is_null())
        .then(pl.col("name"))
        .when(pl.col("backward"))
        .then(pl.format("{}, stashed seq = {}", "name", seq))
        .otherwise(pl.format("{}, seq = {}", "name", seq))
    )
    return cpu.with_columns(name.alias("name"))


def with_flow_correlation(frame: pl.DataFrame, flows: pl.DataFrame, ph: str) -> pl.DataFrame:
    """Fill null `correlation` of `frame`'s events from launch flows of phase `ph`."""
    if flows.is_empty() or not frame["correlation"].null_count():
        return frame
    found = _bound(frame, flows, ph)
    by_flow = pl.repeat(None, frame.height, dtype=pl.Int64, eager=True)
    by_flow = by_flow.scatter(found["row"], found["id"])
    return frame.with_columns(pl.coalesce(pl.col("correlation"), by_flow).alias("correlation"))
