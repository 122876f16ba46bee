"""The HTML report's chart of communication: each collective's time, hidden behind
compute and exposed, from the communication answer alone (pure).

`communication_chart(answer)` takes `nsysmap.report.communication`'s answer and
draws one stacked bar per collective (one-off collectives, such as DDP's
parameter broadcast at start-up, apart); None where the profile has no
communication kernels.
"""

from __future__ import annotations

from typing import Any

from nsysmap.report.html.chart import Chart, Table, bar, category_axis, layout, ms, ratio, time_axis

HIDDEN, EXPOSED = "#2ca02c", "#d62728"


def _per_collective(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows summed per collective (phases together), one-off ones apart, most time first."""
    sums: dict[str, dict[str, Any]] = {}
    for key, rows in (("", answer["collectives"]), (" (one-off)", answer["one_off"])):
        for row in rows:
            name = f"{row['collective']}{key}"
            entry = sums.setdefault(name, {"name": name, "calls": 0, "time_ns": 0, "hidden_ns": 0})
            entry["exposed_ns"] = entry.get("exposed_ns", 0) + row["exposed_ns"]
            for column in ("calls", "time_ns", "hidden_ns"):
                entry[column] += row[column]
    return sorted(sums.values(), key=lambda r: (-r["time_ns"], r["name"]))


def communication_chart(answer: dict[str, Any]) -> Chart | None:
    """Per collective: time hidden behind compute and time exposed (see the module)."""
    if answer.get("unknown") is not None or (
        not answer.get("collectives") and not answer.get("one_off")
    ):
        return None
    rows = _per_collective(answer)
    names = [r["name"] for r in rows]
    data = [
        bar("hidden behind compute", names, [ms(r["hidden_ns"]) for r in rows], HIDDEN),
        bar("exposed", names, [ms(r["exposed_ns"]) for r in rows], EXPOSED),
    ]
    devices = answer.get("devices") or 1
    summed = f"summed over {devices} devices" if devices > 1 else "on one device"
    table = [
        [
            r["name"],
            r["calls"],
            ms(r["time_ns"]),
            ms(r["hidden_ns"]),
            ms(r["exposed_ns"]),
            ratio(r["exposed_ns"] / r["time_ns"] if r["time_ns"] else None),
        ]
        for r in rows
    ]
    return Chart(
        "communication",
        "Communication: hidden and exposed",
        f"Each collective's kernel time, {summed} (calls too): the part during which compute "
        "ran on another stream of the device (hidden) and the rest (exposed).",
        {
            "data": data,
            "layout": layout(
                "Communication per collective",
                barmode="stack",
                xaxis=category_axis("collective"),
                yaxis=time_axis("ms"),
            ),
        },
        Table(
            ["collective", "calls", "time", "hidden", "exposed", "exposed share"],
            table,
            ["text", "number", "ms", "ms", "ms", "share"],
        ),
    )
