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
* A GPU operation's "External id" names the CPU operator that launched it in
  most traces, but some (older Kineto) write the correlation id there, and
  on the launch call too: the operator it names is then an unrelated one
  (a gate's small GEMM given an expert's `addmm` shapes). `launching_operators`
  trusts the id only where the operator it names is open on the launching
  thread when the launch call starts, and otherwise takes the innermost
  operator open there; work without a launch call gets none.

      main thread   |-- aten::addmm (External id 14) --|     aten::view (External id 23)
                          cudaLaunchKernel (correlation 23, External id 23)
      kernel        External id 23  ->  aten::addmm, not aten::view
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from nsysmap.intervals.forest import Forest, group_index
from nsysmap.intervals.nesting import nest_repaired
from nsysmap.read.torch.torch_columns import ids, ns_from_us

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


def with_flow_correlation(
    frame: pl.DataFrame, launch_flows: Callable[[], pl.DataFrame], ph: str
) -> pl.DataFrame:
    """Fill null `correlation` of `frame`'s events from launch flows of phase `ph`.

    `launch_flows` makes the flows' table (`flow_frame`) when it is called, which is
    only when an event lacks a correlation (in most traces none does).
    """
    if not frame["correlation"].null_count() or (flows := launch_flows()).is_empty():
        return frame
    found = _bound(frame, flows, ph)
    by_flow = pl.repeat(None, frame.height, dtype=pl.Int64, eager=True)
    by_flow = by_flow.scatter(found["row"], found["id"])
    return frame.with_columns(pl.coalesce(pl.col("correlation"), by_flow).alias("correlation"))


def launching_operators(gpu: pl.DataFrame, api: pl.DataFrame, cpu: pl.DataFrame) -> pl.Series:
    """Per GPU operation of `gpu` (correlation_id, external_id), the row in `cpu` (pid,
    tid, start_ns, end_ns, external_id) of the operator that launched it, or null.

    `api` holds the launch calls (pid, tid, correlation_id, start_ns).
    """
    nothing = pl.repeat(None, gpu.height, dtype=pl.UInt32, eager=True).alias("cpu_row")
    if cpu.is_empty() or api.is_empty():
        return nothing
    calls = api.unique("correlation_id", keep="first", maintain_order=True)
    launch = gpu.select("correlation_id", "external_id").join(
        calls.select("correlation_id", "pid", "tid", "start_ns"),
        on="correlation_id",
        how="left",
        maintain_order="left",
    )
    ops = cpu.select("pid", "tid", "start_ns", "end_ns").with_row_index("row")
    named = cpu.select("external_id").with_row_index("named").drop_nulls()
    named = named.unique("external_id", keep="first")
    launch = launch.join(named, on="external_id", how="left", maintain_order="left")
    open_at = _innermost(ops, launch.select("pid", "tid", "start_ns"))
    at = ops[launch["named"].fill_null(0)]
    trusted = (
        launch["named"].is_not_null()
        & (at["pid"] == launch["pid"])
        & (at["tid"] == launch["tid"])
        & (at["start_ns"] <= launch["start_ns"])
        & (at["end_ns"] > launch["start_ns"])
    ).fill_null(False)
    return pl.select(pl.when(trusted).then(launch["named"]).otherwise(open_at)).to_series()


def _innermost(ops: pl.DataFrame, queries: pl.DataFrame) -> pl.Series:
    """Per query (pid, tid, start_ns), the `row` of the innermost op of `ops` (row, pid,
    tid, start_ns, end_ns) open at its start on its thread; null where none is."""
    out = pl.repeat(None, queries.height, dtype=pl.UInt32, eager=True)
    asked = queries.with_row_index("query").drop_nulls()
    coded = group_index(
        pl.concat([ops.select("pid", "tid"), asked.select("pid", "tid")]), ["pid", "tid"]
    )
    if coded is None or asked.is_empty():
        return out
    codes = coded[0]
    nested, _ = nest_repaired(
        ops.with_columns(thread=codes.slice(0, ops.height), row=pl.col("row").cast(pl.Int64)),
        by=["thread"],
        id_col="row",
    )
    forest = Forest.of(nested, nested["thread"], "row")
    asked = asked.with_columns(thread=codes.slice(ops.height)).sort("start_ns")
    found = forest.innermost(asked["thread"], asked["start_ns"])
    rows = nested["row"].cast(pl.UInt32).gather(found)
    return out.scatter(asked["query"], rows)
