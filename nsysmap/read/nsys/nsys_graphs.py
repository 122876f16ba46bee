"""CUDA graphs in nsys exports: which GPU ops ran in or as a graph, and where it was captured.

Part of the nsys reader's frames stage (`nsysmap.read.nsys.nsys_frames` calls
`split_graphs`; Polars only). Two capture modes:

* `--cuda-graph-trace=graph` (nsys's default): each replay is one row of
  `CUPTI_ACTIVITY_KIND_GRAPH_TRACE` (a `graph` op, built in `nsys_gpu_ops`),
  launched by `cudaGraphLaunch` with the same correlation id.
* `--cuda-graph-trace=node`: every kernel, memcpy and memset of a replay is
  its own row carrying `graphNodeId` (and `graphId` from nsys 2025.5), with
  the correlation id of the `cudaGraphLaunch` that replayed it.

Either way the op is attributed through its launch like any other. Beyond
that, the export records when each node (or graph) was created, on which
thread, and which node it was cloned from when a graph is instantiated::

    capture (thread 1)   |-- module c_fc --|             node 5 created at t
    instantiate                                 node 9 := clone of node 5
    replay                                                   kernel of node 9

`capture_points` follows the clones back to the original and keeps its
creation thread and time, so attribution can also name the ranges open where
the node was captured. Creations are the earliest event of each id in its
process; a chain that does not end in a recorded creation leaves the capture
point unknown (null).
"""

from __future__ import annotations

import polars as pl

from nsysmap.read.nsys import nsys_specs as specs

# Clone chains are followed at most this deep (a cycle leaves the point unknown).
MAX_CLONE_DEPTH = 16
CAPTURE = ("capture_tid", "capture_ns")


def node_events(node_table: pl.DataFrame | None, graph_table: pl.DataFrame | None) -> pl.DataFrame:
    """Node creation/clone events (pid, tid, t, id, original) from either table."""
    columns = ["start", "globalTid", "graphNodeId", "originalGraphNodeId"]
    frames = [
        specs.GRAPH_NODE_EVENTS.empty_if_none(node_table).select(columns),
        specs.GRAPH_EVENTS.empty_if_none(graph_table).select(columns),
    ]
    events = pl.concat(frames).filter(pl.col("graphNodeId").is_not_null())
    return _events(events, "graphNodeId", "originalGraphNodeId")


def graph_events(graph_table: pl.DataFrame | None) -> pl.DataFrame:
    """Graph creation/clone events (pid, tid, t, id, original) of CUDA_GRAPH_EVENTS."""
    events = specs.GRAPH_EVENTS.empty_if_none(graph_table).filter(pl.col("graphId").is_not_null())
    return _events(events, "graphId", "originalGraphId")


def _events(frame: pl.DataFrame, id_col: str, original_col: str) -> pl.DataFrame:
    return frame.select(
        pid=specs.process_id("globalTid"),
        tid=specs.thread_id("globalTid"),
        t="start",
        id=id_col,
        original=original_col,
    )


def capture_points(events: pl.DataFrame) -> pl.DataFrame:
    """Per (pid, id): the thread and time at which the original of `id` was created.

    Columns pid, id, capture_tid, capture_ns (null when the chain of clones
    does not end at a recorded creation).
    """
    first = (
        events.sort("t")
        .group_by("pid", "id", maintain_order=True)
        .agg(
            pl.col("tid").first(),
            pl.col("t").first(),
            pl.col("original").drop_nulls().first(),
        )
    )
    links = first.select("pid", root="id", next="original")
    chain = first.select("pid", "id", root="id", next="original")
    for _ in range(MAX_CLONE_DEPTH):
        if chain["next"].is_null().all():
            break
        # Move one link up; a chain already at its original has no next and stays.
        chain = chain.select("pid", "id", root=pl.coalesce("next", "root"))
        chain = chain.join(links, on=["pid", "root"], how="left", maintain_order="left")
    origin = first.select("pid", root="id", capture_tid="tid", capture_ns="t")
    chain = chain.join(origin, on=["pid", "root"], how="left", maintain_order="left")
    unresolved = pl.col("next").is_not_null()  # still a clone after MAX_CLONE_DEPTH links
    return chain.select(
        "pid", "id", *(pl.when(~unresolved).then(pl.col(c)).alias(c) for c in CAPTURE)
    )


def graph_links(ops: pl.DataFrame, nodes: pl.DataFrame, graphs: pl.DataFrame) -> pl.DataFrame:
    """GRAPH_LINKS rows: node ops with their node's capture point, replays with their graph's.

    `ops` as built by `nsys_gpu_ops.gpu_ops_frame` (with graph_node_id and
    graph_id); `nodes` and `graphs` from `capture_points`.
    """
    member = pl.col("graph_node_id").is_not_null() | (pl.col("kind") == "graph")
    linked = ops.filter(member).select("op_id", "pid", "graph_id", "graph_node_id")
    by_node = {"id": "graph_node_id", "capture_tid": "n_tid", "capture_ns": "n_ns"}
    by_graph = {"id": "graph_id", "capture_tid": "g_tid", "capture_ns": "g_ns"}
    joined = linked.join(
        nodes.rename(by_node), on=["pid", "graph_node_id"], how="left", maintain_order="left"
    ).join(graphs.rename(by_graph), on=["pid", "graph_id"], how="left", maintain_order="left")
    is_node = pl.col("graph_node_id").is_not_null()
    return joined.select(
        "op_id",
        "graph_id",
        "graph_node_id",
        capture_tid=pl.when(is_node).then("n_tid").otherwise("g_tid"),
        capture_ns=pl.when(is_node).then("n_ns").otherwise("g_ns"),
    )


def graph_facts(ops: pl.DataFrame, links: pl.DataFrame) -> dict[str, object]:
    """Counts for the profile's meta: replays, node ops, their time, and captures found."""
    replays = ops.filter(pl.col("kind") == "graph")
    nodes = ops.filter(pl.col("graph_node_id").is_not_null())
    if replays.is_empty() and nodes.is_empty():
        return {}
    in_node = pl.col("graph_node_id").is_not_null()
    captured = links.filter(in_node, pl.col("capture_ns").is_not_null())
    return {
        "graph_replays": replays.height,
        "graph_replay_time_ns": int(replays["dur_ns"].sum()),
        "graph_node_ops": nodes.height,
        "graph_node_time_ns": int(nodes["dur_ns"].sum()),
        "graph_node_ops_with_capture": captured.height,
    }


def split_graphs(
    ops: pl.DataFrame, node_table: pl.DataFrame | None, graph_table: pl.DataFrame | None
) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, object]]:
    """(gpu_ops without the graph columns, GRAPH_LINKS, facts for meta).

    `node_table` and `graph_table` are CUDA_GRAPH_NODE_EVENTS and
    CUDA_GRAPH_EVENTS as read (None when absent).
    """
    nodes = capture_points(node_events(node_table, graph_table))
    graphs = capture_points(graph_events(graph_table))
    in_graphs = ops["graph_node_id"].is_not_null().any() or (ops["kind"] == "graph").any()
    # Without graph work (the common case) the links are empty: no filter over every op.
    links = graph_links(ops if in_graphs else ops.clear(), nodes, graphs)
    facts = graph_facts(ops, links) if in_graphs else {}
    return ops.drop("graph_node_id", "graph_id"), links, facts
