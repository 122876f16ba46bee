"""The HTML report's chart of where the GPU waits, from the waits answer alone (pure).

`waits_chart(answer)` takes `nsysmap.report.waits.waits_answer`'s dict and
draws each phase's wall time as stacked bars: the GPU time of its operations,
then the idle time just before them by kind (launch-bound, synchronisation,
other stream or communication, the rest). None when the answer is unknown.
"""

from __future__ import annotations

from typing import Any

from nsysmap.report.html.chart import Chart, bar, chart, ms, ratio, stacked, table

# (the answer's column, the bar's name, its colour), stacked in this order.
PARTS = (
    ("busy_ns", "GPU busy", "#1f77b4"),
    ("idle_launch_ns", "launch-bound idle", "#d62728"),
    ("idle_sync_ns", "synchronisation idle", "#ff7f0e"),
    ("idle_other_stream_ns", "other stream / communication wait", "#9467bd"),
    ("idle_rest_ns", "other idle (GPU latency, unknown, stream start)", "#bcbcbc"),
)


def waits_chart(answer: dict[str, Any]) -> Chart | None:
    """Per phase: GPU time and the idle time before it by kind (see the module)."""
    if answer.get("unknown") is not None or not answer.get("phases"):
        return None
    rows = [_with_rest(r) for r in answer["phases"]]
    names = [r["phase"] or "(none)" for r in rows]
    data = [bar(label, names, [ms(r[key]) for r in rows], colour) for key, label, colour in PARTS]
    phases_scope = answer.get("cost_scope") or answer["scope"]  # the phases' own scope
    scope = "the steps" if phases_scope == "steps" else "the whole capture"
    caption = (
        f"Summed over {scope} and every stream: each phase's operations and the idle time"
        " of their stream just before them, by what the GPU waited for (docs/waits.md)."
    )
    cells = [
        [n, *(ms(r[key]) for key, _, _ in PARTS), ratio(r["launch_bound_share"])]
        for n, r in zip(names, rows, strict=True)
    ]
    columns = [("phase", "text"), *((label, "ms") for _, label, _ in PARTS)]
    return chart(
        "waits",
        "Where the GPU waits, by phase",
        caption,
        heading="Wall time by phase: busy and waiting",
        data=data,
        rows=table([*columns, ("launch-bound share", "share")], cells),
        **stacked("phase", "ms"),
    )


def _with_rest(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with idle_rest_ns: the idle time before it not of the kinds drawn apart."""
    apart = row["idle_launch_ns"] + row["idle_sync_ns"] + row["idle_other_stream_ns"]
    return {**row, "idle_rest_ns": row["idle_before_ns"] - apart}
