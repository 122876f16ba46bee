"""`nsysmap report`: where the GPU waits, per stream and phase, and what to fuse (pure).

`read_waits(run_dir, manifest)` reads the waits tables an output directory
holds (None before output schema 1.6); `waits_answer(tables)` gives a
JSON-able answer from them; `waits_section(answer)` renders it as Markdown
from the answer alone. Definitions: docs/waits.md (nsysmap.waits).

The answer covers the steps (every row with a step) when the run has any,
else the measured region its structure found, where that leaves out part of
the capture (set-up, warm-up), else the whole capture as one window. Times
are summed over the steps; `steps` says how many (device, step) windows that
is. The measured region's streams are worked out from its operations and the
capture's gaps (nsysmap.waits.tables.window_stream_idle); its phases, modules
and launch calls stay those of the capture (`cost_scope`): their tables show
the launch calls' host time beside the idle time, and the outputs keep no
launch call's duration per operation.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap.core.inert import markdown_code
from nsysmap.core.wait_schemas import WAIT_INTERIOR, WAIT_KINDS
from nsysmap.report.format import ms, pct, plural, sentence, table
from nsysmap.waits.tables import SCHEMAS, is_sync_copy, window_stream_idle

ID = "waits"
QUESTION = (
    "How much of each step's wall time does the GPU spend idle, waiting for what, "
    "and which phase and module keep it waiting?"
)
NO_TABLES = (
    "the outputs hold no waits tables (written from output schema 1.6 on): "
    "attribute the profile again"
)
NO_OPS = "the run has no GPU operations"
MODULE_ROWS = 10  # modules listed, by idle time before them
STREAM_ROWS = 8  # streams listed, busiest first
LEAD_DEVICES = 4  # devices whose busiest stream the first sentence names
# The kinds as the answer groups them, and how the section names them.
KIND_NAMES = {
    "launch": "launch-bound",
    "sync": "synchronisation",
    "other_stream": "other stream / communication",
    "latency": "GPU latency",
    "unknown": "unknown",
    "before_first": "before the stream's first",
    "after_last": "after the stream's last",
}
# The other kinds, as the first sentence names the largest when it outweighs those two.
LEAD_KINDS = {
    "other_stream": "was waiting on other streams or communication",
    "latency": "was GPU latency",
    "unknown": "has no known cause",
    "before_first": "came before the stream's first operation",
    "after_last": "came after the stream's last operation",
}
# The other kinds the sentence names too, when one holds this share of the idle time
# (at most REST_KINDS of them, largest first): else its parts would not add up.
REST = 0.05
REST_KINDS = 2
IDLE = [f"idle_{kind}_ns" for kind in WAIT_KINDS]
IDLE_BEFORE = [f"idle_{kind}_ns" for kind in WAIT_INTERIOR]
COST = ["ops", "launches", "launch_cpu_ns", "shorter_than_launch", "busy_ns", "idle_before_ns"]


def read_waits(run_dir: str | Path, manifest: Mapping[str, Any]) -> dict[str, pl.DataFrame] | None:
    """The waits tables of an output directory (None when its manifest lists none)."""
    listed = manifest.get("tables") or {}
    if not all(name in listed for name in SCHEMAS):
        return None
    return {
        name: pl.read_parquet(Path(run_dir) / listed[name]["file"]).cast(schema)
        for name, schema in SCHEMAS.items()
    }


def waits_answer(
    tables: Mapping[str, pl.DataFrame] | None,
    ops: pl.DataFrame | None = None,
    measured: list[int] | None = None,
    region: pl.DataFrame | None = None,
) -> dict[str, Any]:
    """The waits answer from the tables `read_waits` gives (see the module); `ops`, the
    run's operations, tell which launch calls were synchronous copies; `measured`: the
    step labels of the measured steps (nsysmap.structure), None to take every step;
    `region`: the operations of the measured region, the streams' scope where the
    tables have no steps (None: the whole capture)."""
    if tables is None:
        return _answer(NO_TABLES)
    streams = _scoped(tables["stream_idle"], measured)
    cost = _scoped(tables["launch_cost"], measured)
    if streams.is_empty():
        return _answer(NO_OPS)
    in_steps = streams["step"].is_not_null().any()
    cost_scope = scope = "steps" if in_steps else "whole capture"
    outside: list[int] = []
    if not in_steps and region is not None:
        found = window_stream_idle(region, tables["idle"])
        if not found.is_empty():
            outside = _devices_left_out(streams, found)
            streams, scope = found, "measured region"
    per_stream = (
        streams.group_by("device_id", "stream_id")
        .agg(
            pl.len().cast(pl.Int64).alias("steps"),
            *(pl.col(c).sum() for c in ["wall_ns", "busy_ns", "idle_ns", *IDLE]),
        )
        .sort(["busy_ns", "device_id", "stream_id"], descending=[True, False, False])
    )
    wall = pl.when(pl.col("wall_ns") > 0).then(pl.col("wall_ns"))
    per_stream = per_stream.with_columns(
        (pl.col(c) / wall).alias(c.removesuffix("_ns") + "_share") for c in ["busy_ns", *IDLE]
    )
    phases = _cost_rows(cost, ["phase"]).sort("idle_before_ns", "busy_ns", descending=True)
    modules = _cost_rows(cost, ["module", "phase"]).filter(
        pl.col("module").is_not_null(), pl.col("idle_before_ns") > 0
    )
    modules = modules.sort(["idle_before_ns", "module"], descending=[True, False])
    windows = streams.select("device_id", "step").unique().height
    busiest = per_stream.group_by("device_id", maintain_order=True).first().sort("device_id")
    return _answer(
        None,
        scope=scope,
        cost_scope=cost_scope,
        steps=windows,
        step_count=streams["step"].drop_nulls().n_unique(),
        devices=busiest.height,
        devices_outside=outside,
        busiest=busiest.head(LEAD_DEVICES).to_dicts(),
        streams=per_stream.head(STREAM_ROWS).to_dicts(),
        streams_left_out=max(per_stream.height - STREAM_ROWS, 0),
        phases=phases.to_dicts(),
        modules=modules.head(MODULE_ROWS).to_dicts(),
        module_rows=MODULE_ROWS,
        totals=_totals(cost, _sync_copies(ops, in_steps=bool(in_steps))),
    )


def _devices_left_out(capture: pl.DataFrame, part: pl.DataFrame) -> list[int]:
    """The devices with streams in the capture but no operation in the part, ascending."""
    left = capture.select("device_id").unique().join(part, on="device_id", how="anti")
    return sorted(int(d) for d in left["device_id"].drop_nulls())


def _scoped(frame: pl.DataFrame, measured: list[int] | None = None) -> pl.DataFrame:
    """The rows of the (measured) steps, or every row when there are none."""
    stepped = frame.filter(pl.col("step").is_not_null())
    if measured is not None:
        stepped = stepped.filter(pl.col("step").is_in(measured))
    if stepped.height:
        return stepped
    return frame.with_columns(pl.lit(None, pl.Int64).alias("step"))  # the whole capture


def _cost_rows(cost: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """launch_cost summed over devices and steps per `keys`, with its launch-bound share."""
    rows = cost.group_by(keys).agg(pl.col([*COST, *IDLE_BEFORE]).sum())
    whole = pl.col("busy_ns") + pl.col("idle_before_ns")
    share = pl.when(whole > 0).then(pl.col("idle_launch_ns") / whole).otherwise(0.0)
    return rows.with_columns(launch_bound_share=share)


def _totals(cost: pl.DataFrame, sync_copies: int) -> dict[str, int]:
    """The launches over the scope: counts and the host time spent in launch calls, and
    how many of those calls were synchronous copies or sets."""
    sums = cost.select(pl.col("ops", "launches", "launch_cpu_ns", "shorter_than_launch").sum())
    totals = {k: int(v or 0) for k, v in sums.row(0, named=True).items()}
    return {**totals, "sync_copy_calls": sync_copies}


def _sync_copies(ops: pl.DataFrame | None, *, in_steps: bool) -> int:
    """The operations of the scope launched by a synchronous copy or set call (cudaMemcpy,
    not Async): each its own call, whose host time includes waiting for the copy."""
    if ops is None or "launch_api" not in ops.columns:
        return 0
    scoped = ops.filter(pl.col("step").is_not_null()) if in_steps else ops
    return int(scoped.select(is_sync_copy(pl.col("launch_api")).sum()).item())


def _answer(unknown: str | None, **found: Any) -> dict[str, Any]:
    empty: dict[str, Any] = {
        "scope": None,
        "cost_scope": None,
        "steps": 0,
        "step_count": 0,
        "devices": 0,
        "devices_outside": [],
        "busiest": [],
        "streams": [],
        "streams_left_out": 0,
        "phases": [],
        "modules": [],
        "module_rows": MODULE_ROWS,
        "totals": {},
    }
    return {"id": ID, "question": QUESTION, "unknown": unknown, **empty, **found}


# ------------------------------------------------------------------ Markdown
def waits_section(answer: dict[str, Any]) -> list[str]:
    """Markdown lines for the answer, every number taken from it."""
    lines = ["## Where the GPU waits", ""]
    if answer["unknown"] is not None:
        return [*lines, f"Not known: {answer['unknown']}.", ""]
    lines += [waits_lead(answer), ""]
    lines += _stream_table(answer)
    lines += [f"Per phase{_over_cost(answer)}: the GPU time of its operations and the idle"
              " time just before them (the gaps they ended), by kind of wait; the rest of"
              " the idle time before them was GPU latency, of unknown cause, or before"
              " their stream's first operation. The launch-bound share is of the GPU time"
              " and idle time together.", ""]  # fmt: skip
    lines += _cost_table(answer["phases"], ["phase"])
    if answer["modules"]:
        top = f"top {answer['module_rows']}{_over_cost(answer, ', ')}"
        lines += [f"The modules the GPU waited for most ({top}):", ""]
        lines += _cost_table(answer["modules"], ["module", "phase"])
    lines.append(
        "Launch-bound: the host started the next launch call after the previous operation on"
        " the stream had finished, so the GPU sat idle while Python and the CUDA runtime"
        " prepared it. Fewer, larger kernels (fusion, torch.compile, CUDA graphs) shrink it."
        " Kinds of wait: docs/waits.md."
    )
    return [*lines, ""]


def _over_cost(answer: dict[str, Any], joint: str = " ") -> str:
    """ "over the whole capture" where the phases, modules and launch calls cover more than
    the streams (a measured region without steps: the only such case), else nothing."""
    cost = answer.get("cost_scope")
    return "" if cost is None or cost == answer["scope"] else f"{joint}over the whole capture"


def waits_lead(answer: dict[str, Any]) -> str:
    """The first sentence: the busiest stream's wall time, busy and launch-bound (of each
    device, where there are several)."""
    steps = answer.get("step_count", answer["steps"])
    where = (
        "the measured region"
        if answer["scope"] == "measured region"
        else "the capture"
        if answer["scope"] != "steps"
        else "the step's window"
        if steps == 1
        else f"the {steps:,} steps' windows"
    )
    busiest = answer.get("busiest") or answer["streams"][:1]
    devices = answer.get("devices") or 1
    if devices == 1:
        top = busiest[0]
        text = (
            f"Over {where}, the busiest stream (device {top['device_id']}, stream"
            f" {top['stream_id']}) was busy {_stream_text(top)}."
        )
    else:
        each = [
            f"device {r['device_id']}, stream {r['stream_id']}, was busy {_stream_text(r)}."
            for r in busiest
        ]
        more = devices - len(busiest)
        if more:
            each.append(f"{plural(more, 'more device')} not named here.")
        text = f"Over {where} ({devices:,} devices, the busiest stream of each): "
        text += " ".join([each[0], *(sentence(e) for e in each[1:])])
    return text + _outside_text(answer) + _launch_text(answer["totals"], _over_cost(answer).strip())


def _outside_text(answer: dict[str, Any]) -> str:
    """ " Device 1 ran no operation in the measured region.": the devices the scope leaves
    out although the capture has work of theirs (empty when none)."""
    outside = answer.get("devices_outside") or []
    if not outside:
        return ""
    if len(outside) == 1:
        return f" Device {outside[0]} ran no operation in the measured region."
    named = ", ".join(str(d) for d in outside[:-1]) + f" and {outside[-1]}"
    return f" Devices {named} ran no operation in the measured region."


def _launch_text(t: dict[str, Any], over: str = "") -> str:
    """The launch calls' host time (`over` a wider scope than the streams, when not
    empty), what it holds besides launching (synchronous copies' waits), and the
    operations shorter than their call (the others)."""
    if not t.get("launches"):
        return ""
    calls, copies = t["launches"], t.get("sync_copy_calls", 0)
    lead = f" {over[:1].upper()}{over[1:]}, the host" if over else " The host"
    text = f"{lead} spent {ms(t['launch_cpu_ns'])} in {plural(calls, 'launch call')}"
    if copies:
        which = "all of them" if copies == calls else f"{copies:,} of them"
        copy = "copy or set" if copies == 1 else "copies or sets"
        text += (
            f" ({which} synchronous {copy}, such as cudaMemcpy, whose call lasts until the"
            " copy is done: that waiting is in this time)"
        )
    if copies == calls:
        return text + "."
    shorter = t["shorter_than_launch"]
    return text + (
        f"; {'of the others, ' if copies else ''}{plural(shorter, 'operation')}"
        f" ran for less time than {'its' if shorter == 1 else 'their'} launch call took."
    )


def _stream_text(row: dict[str, Any]) -> str:
    """ "91.3 % of its wall time (299.849 ms); idle ..., of which ...": one stream's waits."""
    text = (
        f"{pct(row['busy_share'])} of its wall time ({ms(row['wall_ns'])}); idle"
        f" {ms(row['idle_ns'])}, of which launch-bound {ms(row['idle_launch_ns'])}"
        f" ({pct(row['idle_launch_share'])} of wall time) and waiting on synchronisations"
        f" {ms(row['idle_sync_ns'])}"
    )
    said = max(row["idle_launch_ns"], row["idle_sync_ns"])
    idle = row["idle_ns"]
    rest = [k for k in LEAD_KINDS if row[f"idle_{k}_ns"] and row[f"idle_{k}_ns"] >= REST * idle]
    rest.sort(key=lambda k: -row[f"idle_{k}_ns"])
    if rest and row[f"idle_{rest[0]}_ns"] > said:
        kind = rest.pop(0)
        text += (
            f"; the largest part, {ms(row[f'idle_{kind}_ns'])} ({pct(row[f'idle_{kind}_share'])}"
            f" of wall time), {LEAD_KINDS[kind]}"
        )
    if rest[:REST_KINDS]:
        parts = [f"{ms(row[f'idle_{k}_ns'])} {LEAD_KINDS[k]}" for k in rest[:REST_KINDS]]
        text += "; besides, " + " and ".join(parts)
    return text


def _stream_table(answer: dict[str, Any]) -> list[str]:
    header = ["device", "stream", "wall", "busy", *(KIND_NAMES[k] for k in WAIT_KINDS)]
    rows = [
        [
            str(r["device_id"]),
            str(r["stream_id"]),
            ms(r["wall_ns"]),
            pct(r["busy_share"]),
            *(pct(r[f"idle_{k}_share"]) for k in WAIT_KINDS),
        ]
        for r in answer["streams"]
    ]
    lines = table(header, rows)
    if answer["streams_left_out"]:
        left = plural(answer["streams_left_out"], "less busy stream")
        lines.insert(-1, f"({left} not shown.)")
    return lines


def _cost_table(rows: list[dict[str, Any]], keys: list[str]) -> list[str]:
    header = [*keys, "GPU time", "idle before", "launch-bound", "sync", "other stream"]
    header += ["launches", "launch CPU time", "shorter than launch"]
    cells = [
        [
            *(_key(r[k], k) for k in keys),
            ms(r["busy_ns"]),
            ms(r["idle_before_ns"]),
            f"{ms(r['idle_launch_ns'])} ({pct(r['launch_bound_share'])})",
            ms(r["idle_sync_ns"]),
            ms(r["idle_other_stream_ns"]),
            f"{r['launches']:,}",
            ms(r["launch_cpu_ns"]),
            f"{r['shorter_than_launch']:,}",
        ]
        for r in rows
    ]
    return table(header, cells)


def _key(value: str | None, key: str) -> str:
    if value is None:
        return f"(outside every {key})"
    return markdown_code(value or "(root)") if key == "module" else value
