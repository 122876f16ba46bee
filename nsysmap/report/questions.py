"""The profiling questions, answered per scope as plain data (pure).

Each function returns one entry of answers.json (nsysmap.report.answer_doc):
values with their units in the key (`_ns`, `_flop`; shares as fractions),
per scope (`forward`, `forward_backward`, `step`: nsysmap.report.scope_tables),
and `unknown` with its reason where the profile cannot tell, never 0 or "–"::

    matmul_share["scopes"]["forward"] ==
        {"time_ns": 43543000, "matmul_time_ns": 33034000, "share": 0.759, "unknown": None, ...}

CUDA graph replays traced as a whole (`nsys --cuda-graph-trace=graph`) hide
their kernels: a scope holding them has no known matmul share, only bounds,
and no known top kernel unless its lead over the runner-up exceeds the
replays' time; the reason says how to get the answer.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from nsysmap.report import scope_tables as rt
from nsysmap.report.kernel_labels import kernel_labels
from nsysmap.structure.table import before_capture

GRAPH_UNKNOWN = (
    "{share} of this scope's time is CUDA graph replays whose kernels were not traced "
    "(nsys --cuda-graph-trace=graph); profile with --cuda-graph-trace=node to see them"
)
NO_WORK = "the profile has no operations in this scope"
# The forward scope is empty when nothing marks the forward pass, not only when none ran.
NO_FORWARD = "no range, record or module call marks a forward pass in this profile"
_KERNEL_KEYS = ["kind", "name", "short_name", "category"]


def _no_work(scope: str) -> str:
    return NO_FORWARD if scope == "forward" else NO_WORK


def present_scopes(ops: pl.DataFrame) -> list[str]:
    """The scopes worth answering: forward + backward only when there is backward work."""
    return [s for s in rt.SCOPES if rt.has_backward(ops) or s != "forward_backward"]


def graph_ns(rows: pl.DataFrame) -> int:
    """Time of whole-graph replays (kind `graph`) among `rows`."""
    return int(rows.filter(pl.col("kind").cast(pl.String) == "graph")["dur_ns"].sum())


def _graph_reason(graph: int, total: int) -> str:
    return GRAPH_UNKNOWN.format(share=f"{100 * graph / total:.1f} %")


def matmul_share(ops: pl.DataFrame) -> dict[str, Any]:
    """Matrix multiplication's share of time per scope."""
    scopes: dict[str, Any] = {}
    for scope in present_scopes(ops):
        rows = rt.scope_filter(ops, scope)
        total = int(rows["dur_ns"].sum())
        matmul = int(rows.filter(rt.is_matmul())["dur_ns"].sum())
        graph = graph_ns(rows)
        entry: dict[str, Any] = {
            "time_ns": total,
            "matmul_time_ns": matmul,
            "graph_replay_ns": graph,
            "share": rt.share(matmul, total),
            "unknown": None if total else _no_work(scope),
        }
        if graph:
            entry["share"] = None
            entry["unknown"] = _graph_reason(graph, total)
            entry["share_at_least"] = rt.share(matmul, total)
            entry["share_at_most"] = rt.share(matmul + graph, total)
        scopes[scope] = entry
    return {
        "question": "What fraction of the time is matrix multiplication, forward only and in "
        "the full step?",
        "definition": rt.MATMUL_DEFINITION,
        "scopes": scopes,
    }


def _kernel_totals(rows: pl.DataFrame) -> pl.DataFrame:
    """Calls and time per kernel (copies, memsets and graph replays left out: no kernels),
    most time first."""
    kernels = rows.filter(rt.is_kernel())
    grouped = kernels.group_by(_KERNEL_KEYS).agg(
        pl.len().alias("calls"), pl.col("dur_ns").sum().alias("time_ns")
    )
    grouped = grouped.with_columns(pl.col("kind").cast(pl.String))
    return grouped.sort(["time_ns", "name"], descending=[True, False])


def _labelled(frame: pl.DataFrame) -> list[dict[str, Any]]:
    rows = frame.to_dicts()
    for row, label in zip(rows, kernel_labels(frame["name"].fill_null("?").to_list()), strict=True):
        row["label"] = label
    return rows


def top_kernel(
    ops: pl.DataFrame, forward_passes: int | None, passes_source: str | None
) -> dict[str, Any]:
    """The kernel with the most time per scope, its calls per pass and per forward pass."""
    forward = rt.scope_filter(ops, "forward")
    forward_calls = forward.group_by("name").agg(pl.len().alias("forward_calls"))
    scopes: dict[str, Any] = {}
    for scope in present_scopes(ops):
        rows = rt.scope_filter(ops, scope)
        total = int(rows["dur_ns"].sum())
        leaders = _kernel_totals(rows).head(2)
        top = leaders.head(1)
        if top.is_empty():
            scopes[scope] = {"unknown": _no_work(scope), "time_ns": total}
            continue
        kernel = _labelled(top)[0]
        count = forward_passes if scope == "forward" else rt.passes(rows)
        calls_forward = forward_calls.filter(pl.col("name") == kernel["name"])["forward_calls"]
        fwd_calls = int(calls_forward[0]) if calls_forward.len() else 0
        graph = graph_ns(rows)
        runner_up = int(leaders["time_ns"][1]) if leaders.height > 1 else 0
        # The replays' unseen kernels could lift the runner-up (or a kernel seen only in
        # them) past the leader: the top kernel is known only when they cannot.
        hidden = graph > 0 and graph >= kernel["time_ns"] - runner_up
        scopes[scope] = {
            **kernel,
            "share": rt.share(kernel["time_ns"], total),
            "scope_time_ns": total,
            "passes": count,
            "calls_per_pass": rt.share(kernel["calls"], count),
            "forward_calls": fwd_calls,
            "calls_per_forward_pass": rt.share(fwd_calls, forward_passes),
            "unknown": _graph_reason(graph, total) if hidden else None,
        }
    same, why = _same_with_backward(scopes)
    return {
        "question": "Which kernel takes the most time, how often is it called per forward pass, "
        "and is it the same kernel with backward included?",
        "forward_passes": forward_passes,
        "forward_passes_source": passes_source,
        "scopes": scopes,
        "same_with_backward": same,
        "same_with_backward_unknown": why,
    }


def _same_with_backward(scopes: dict[str, Any]) -> tuple[bool | None, str | None]:
    forward, both = scopes.get("forward"), scopes.get("forward_backward")
    if forward is None or forward.get("unknown") == NO_FORWARD:
        return None, NO_FORWARD
    if both is None:
        return None, "no backward work in this profile: it is forward-only"
    if forward.get("unknown") or both.get("unknown"):
        return None, forward.get("unknown") or both.get("unknown")
    return forward["name"] == both["name"], None


def non_matmul_kernels(ops: pl.DataFrame, min_share: float) -> dict[str, Any]:
    """Per scope: non-matmul kernels with at least `min_share` of its time, and the same
    work grouped by the PyTorch operator that launched it, where the profile says."""
    scopes: dict[str, Any] = {}
    for scope in present_scopes(ops):
        rows = rt.scope_filter(ops, scope)
        total = int(rows["dur_ns"].sum())
        if not total:
            scopes[scope] = {"unknown": _no_work(scope), "kernels": [], "operators": []}
            continue
        other = rows.filter(~rt.is_matmul())
        kernels = _kernel_totals(other).with_columns(share=pl.col("time_ns") / total)
        kernels = kernels.filter(pl.col("share") >= min_share)
        scopes[scope] = {
            "time_ns": total,
            "graph_replay_ns": graph_ns(rows),
            "non_matmul_time_ns": int(other["dur_ns"].sum()),
            "copies_ns": int(rows.filter(_copy_or_set())["dur_ns"].sum()),
            "kernels": _labelled(kernels),
            "operators": _operators(other, total, min_share),
            "operators_unknown": None
            if other["aten_op"].is_not_null().any()
            else "no PyTorch operator ranges or records name the operators",
            "unknown": None,
        }
    return {
        "question": "Which kernels besides matrix multiplications take non-trivial time?",
        "min_share": min_share,
        "scopes": scopes,
    }


def _operators(rows: pl.DataFrame, total: int, min_share: float) -> list[dict[str, Any]]:
    """Non-matmul time per PyTorch operator (`aten::mul`, `aten::exp`, ...)."""
    named = rows.filter(pl.col("aten_op").is_not_null())
    grouped = (
        named.group_by("aten_op")
        .agg(
            pl.len().alias("kernels"),
            pl.col("name").n_unique().alias("distinct_kernels"),
            pl.col("dur_ns").sum().alias("time_ns"),
            pl.col("category").mode().sort().first().alias("category"),
        )
        .with_columns(share=pl.col("time_ns") / total)
        .filter(pl.col("share") >= min_share)
        .sort(["time_ns", "aten_op"], descending=[True, False])
    )
    return grouped.to_dicts()


_REGION_ORDER = ("setup", "warmup", "measured", "tail")
# Operations in no region: launched before the capture (the GPU ran them as it began), or
# outside every region the structure found.
_UNPLACED = ("before_capture", "outside")


def _copy_region(ops: pl.DataFrame) -> pl.Expr:
    """Each operation's region (`ops` placed in the structure), or why it has none
    (_UNPLACED); over every operation, since "before the capture" asks whether others
    of its process had a launch call."""
    early = before_capture().fill_null(False)
    unplaced = pl.when(early).then(pl.lit("before_capture")).otherwise(pl.lit("outside"))
    return pl.col("s_region").fill_null(unplaced)


def _copy_or_set() -> pl.Expr:
    return pl.col("kind").cast(pl.String).is_in(["memcpy", "memset"])


def copies(ops: pl.DataFrame) -> dict[str, Any]:
    """Copies and memsets, which are no kernels: per name, their calls and time, and the
    regions of the structure they ran in (where the operations carry it)."""
    total = int(ops["dur_ns"].sum())
    if ops.filter(_copy_or_set()).is_empty():
        return {"rows": [], "time_ns": 0, "share": 0.0, "unknown": "no copies or memsets"}
    moved = ops.with_columns(_region=_copy_region(ops)).filter(_copy_or_set())
    rows = []
    for (kind, name), part in moved.group_by("kind", "name", maintain_order=True):
        by_region = part.group_by("_region").agg(pl.col("dur_ns").sum())
        regions = dict(zip(by_region["_region"], by_region["dur_ns"], strict=True))
        rows.append(
            {
                "kind": str(kind),
                "name": name,
                "calls": part.height,
                "time_ns": int(part["dur_ns"].sum()),
                "share": rt.share(int(part["dur_ns"].sum()), total),
                "regions_ns": {
                    r: int(regions[r]) for r in (*_REGION_ORDER, *_UNPLACED) if r in regions
                },
            }
        )
    rows.sort(key=lambda r: (-r["time_ns"], str(r["name"])))
    in_step = rt.scope_filter(ops, "step")
    in_step = in_step.filter(_copy_or_set())
    time, kept = int(moved["dur_ns"].sum()), int(in_step["dur_ns"].sum())
    return {
        "question": "How much time goes to copies and memsets (which are no kernels)?",
        "rows": rows,
        "time_ns": time,
        "share": rt.share(time, total),
        "in_step_scope_ns": kept,
        "left_out_ns": time - kept,
        "unknown": None,
    }
