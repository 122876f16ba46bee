"""`nsysmap report`: communication per collective and phase, hidden and exposed (pure).

`communication_answer(ops)` takes the ops frame of `ops.parquet` and gives a
JSON-able answer; `communication_section(answer)` renders it as Markdown
from the answer alone. Definitions (docs/report.md, Communication):

* communication is every kernel of category `communication`; its hidden
  and exposed time are nsysmap's one definition
  (nsysmap.summaries.comm_overlap.hidden_communication, the measure of
  `overlap.parquet` and `rank_comm.parquet`);
* each kernel's collective comes from its name or, for generic kernels,
  its annotation (nsysmap.report.collectives);
* a kernel is *one-off* when it lies outside every step and starts before
  the first start of any step's operation of the same process and device,
  and rank in the operations of several reports: DDP's parameter broadcast
  at start-up. Without steps nothing is one-off.
  One-off rows are listed apart (`one_off`), every other kernel in
  `collectives` (`in_steps` says whether it lies in a step).

Rows are summed over devices, processes and ranks.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from nsysmap.core.inert import markdown_code
from nsysmap.report.collectives import collective
from nsysmap.report.format import OUTSIDE_PHASES, ms, pct, per, table
from nsysmap.summaries.comm_overlap import COMM, hidden_communication, same_keys

ID = "communication"
QUESTION = (
    "How much time goes to communication, per collective and phase, "
    "and how much of it is hidden behind compute?"
)
NO_KERNELS = "this profile has no communication kernels (NCCL or other collectives)"
SUMS = ("calls", "time_ns", "hidden_ns", "exposed_ns")
ROW_KEYS = ("collective", "phase", "in_steps", "one_off")


def communication_answer(ops: pl.DataFrame) -> dict[str, Any]:
    """The communication answer for an OPS frame (see the module)."""
    left_out = _left_out(ops)
    kernels = hidden_communication(ops, keep=["step", "phase", "name", "range_path"])
    if kernels.is_empty():
        return _answer(_why_unknown(left_out), _sums(kernels), [], [], left_out)
    same = same_keys(ops)
    first = (
        ops.filter(pl.col("step").is_not_null())
        .group_by(same)
        .agg(first_step_ns=pl.col("start_ns").min())
    )
    kernels = kernels.join(first, on=same, how="left", nulls_equal=True).with_columns(
        collective=collective(pl.col("name"), pl.col("range_path")),
        in_steps=pl.col("step").is_not_null(),
        one_off=(
            pl.col("step").is_null() & (pl.col("start_ns") < pl.col("first_step_ns"))
        ).fill_null(False),
    )
    rows = (
        kernels.group_by(ROW_KEYS)
        .agg(
            calls=pl.len().cast(pl.Int64),
            time_ns=pl.col("dur_ns").sum(),
            hidden_ns=pl.col("hidden_ns").sum(),
            exposed_ns=pl.col("exposed_ns").sum(),
        )
        .sort(["time_ns", "collective", "phase"], descending=[True, False, False])
        .select(*ROW_KEYS, *SUMS)
    )
    steady = rows.filter(~pl.col("one_off")).to_dicts()
    once = rows.filter(pl.col("one_off")).to_dicts()
    return _answer(None, _sums(kernels), steady, once, left_out)


def _answer(
    unknown: str | None,
    totals: dict[str, int],
    rows: list[dict[str, Any]],
    one_off: list[dict[str, Any]],
    left_out: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "id": ID,
        "question": QUESTION,
        "unknown": unknown,
        # Calls and times are summed over the devices (and ranks) that ran communication.
        "devices": totals.get("devices", 0),
        "calls_per_device": totals["calls"] / totals["devices"] if totals.get("devices") else None,
        "totals": _with_shares({k: v for k, v in totals.items() if k != "devices"}),
        "collectives": [_with_shares(r) for r in rows],
        "one_off": [_with_shares(r) for r in one_off],
        "left_out": left_out,
    }


def _with_shares(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with `hidden_share` and `exposed_share` of its time (null without time)."""
    time = row.get("time_ns") or 0
    shares = {
        f"{key}_share": (row[f"{key}_ns"] / time if time else None) for key in ("hidden", "exposed")
    }
    return {**row, **shares}


def _sums(kernels: pl.DataFrame) -> dict[str, int]:
    """time_ns, hidden_ns, exposed_ns and calls over every communication kernel."""
    return {
        "time_ns": int(kernels["dur_ns"].sum()),
        "hidden_ns": int(kernels["hidden_ns"].sum()),
        "exposed_ns": int(kernels["exposed_ns"].sum()),
        "calls": kernels.height,
        "devices": kernels.select(pl.col("device_id", "pid")).unique().height
        if kernels.height
        else 0,
    }


def _left_out(ops: pl.DataFrame) -> list[dict[str, Any]]:
    """Time this answer does not measure, with why: communication that is not a GPU
    kernel, and CUDA graph replays (traced whole, so what they hold is not seen)."""
    not_kernels = ops.filter(pl.col("category") == "communication", ~COMM)
    out = [
        {
            "what": f"communication operations of kind {kind}",
            "time_ns": int(time_ns),
            "why": "not GPU kernels: on the GPU nothing of them is timed"
            if kind != "cpu_op"
            else "CPU operators of a trace without GPU activity: CPU time, not GPU time",
        }
        for kind, time_ns in not_kernels.group_by("kind")
        .agg(pl.col("dur_ns").sum())
        .sort("kind")
        .iter_rows()
    ]
    graphs = ops.filter(pl.col("kind") == "graph")
    if graphs.height:
        out.append(
            {
                "what": "CUDA graph replays",
                "time_ns": int(graphs["dur_ns"].sum()),
                "why": "each replay is traced as one interval: communication inside it is "
                "not seen (a replay counts as compute that hides communication)",
            }
        )
    return out


def _why_unknown(left_out: list[dict[str, Any]]) -> str:
    reasons = [NO_KERNELS]
    if any(item["what"].startswith("communication") for item in left_out):
        reasons.append("its communication is not GPU kernels")
    if any(item["what"] == "CUDA graph replays" for item in left_out):
        reasons.append("communication inside CUDA graph replays is not seen")
    return "; ".join(reasons)


# ------------------------------------------------------------------ Markdown
def communication_section(answer: dict[str, Any]) -> list[str]:
    """Markdown lines for the answer, every number taken from it."""
    lines = ["## Communication", ""]
    if answer["unknown"] == NO_KERNELS:  # nothing hides any: none ran in the capture
        return [*lines, f"None: {NO_KERNELS}, so no GPU time went to it in this capture.", ""]
    if answer["unknown"] is not None:
        return [*lines, f"Not known: {answer['unknown']}.", ""]
    t = answer["totals"]
    lines.append(
        f"Communication kernels ran for {ms(t['time_ns'])} in {_calls(t['calls'])}:"
        f" {ms(t['hidden_ns'])} ({_share(t, 'hidden_ns')}) hidden behind compute on other"
        f" streams, {ms(t['exposed_ns'])} ({_share(t, 'exposed_ns')}) exposed."
        f" {_summed(answer.get('devices') or 1, answer.get('calls_per_device'))}"
    )
    lines += [*_one_off_text(answer["one_off"]), ""]
    header = ["collective", "phase", "where", "calls", "time", "hidden", "exposed", "exposed share"]
    rows = [_cells(r, "one-off, before the first step") for r in answer["one_off"]]
    rows += [
        _cells(r, "in steps" if r["in_steps"] else "outside steps") for r in answer["collectives"]
    ]
    lines += table(header, rows)
    for item in answer["left_out"]:
        lines.append(f"Left out: {item['what']} ({ms(item['time_ns'])}): {item['why']}.")
    return [*lines, ""] if answer["left_out"] else lines


def _summed(devices: int, per_device: float | None) -> str:
    """Whether calls and times are one device's (rank's) or summed over several."""
    if devices == 1 or per_device is None:
        return "One device (rank) ran them: calls and times are its own."
    return (
        f"Calls and times are summed over the {devices} devices (ranks) that ran them, "
        f"{per(per_device)} calls per device on average; each kernel counts its own time."
    )


def _calls(n: int) -> str:
    return "1 call" if n == 1 else f"{n:,} calls"


def _share(row: dict[str, Any], key: str) -> str:
    return pct(row[key.replace("_ns", "_share")])


def _one_off_text(one_off: list[dict[str, Any]]) -> list[str]:
    """A sentence on the one-off communication before the first step, when there is any."""
    if not one_off:
        return []
    parts = [f"{r['collective']} {ms(r['time_ns'])} in {_calls(r['calls'])}" for r in one_off]
    return [
        "One-off communication before the first step (start-up work, not per-step):"
        f" {', '.join(parts)}; the table lists it apart."
    ]


def _cells(r: dict[str, Any], where: str) -> list[str]:
    return [
        markdown_code(r["collective"]),
        r["phase"] or OUTSIDE_PHASES,
        where,
        f"{r['calls']:,}",
        ms(r["time_ns"]),
        ms(r["hidden_ns"]),
        ms(r["exposed_ns"]),
        _share(r, "exposed_ns"),
    ]
