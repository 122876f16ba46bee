"""The terminal summary's line on CUDA graphs (from the reader's counts in the profile's meta)."""

from __future__ import annotations

NODE_MODE = "nsys profile --cuda-graph-trace=node"


def graph_line(meta: dict[str, str], total_ns: int) -> str:
    """How much GPU time ran in CUDA graphs, and whether the kernels inside are visible.

    Empty when the profile has no graph replays and no graph-node operations.
    """
    replays, nodes = int(meta.get("graph_replays", 0)), int(meta.get("graph_node_ops", 0))
    lines = []
    if replays:
        time_ns = int(meta.get("graph_replay_time_ns", 0))
        lines.append(
            f"CUDA graphs: {replays:,} replay{'s' if replays != 1 else ''},"
            f" {_time(time_ns, total_ns)}, traced whole:"
            f" no per-kernel detail inside them (profile with `{NODE_MODE}` to see it)."
        )
    if nodes:
        time_ns = int(meta.get("graph_node_time_ns", 0))
        captured = int(meta.get("graph_node_ops_with_capture", 0))
        lines.append(
            f"CUDA graphs: {nodes:,} operations ran as graph nodes, {_time(time_ns, total_ns)};"
            f" {captured:,} also attributed to the ranges open where they were captured."
        )
    return "\n".join(lines)


def _time(time_ns: int, total_ns: int) -> str:
    share = f" ({100 * time_ns / total_ns:.1f}% of GPU time)" if total_ns else ""
    return f"{time_ns / 1e6:,.3f} ms{share}"
