"""`nsysmap report`: the waits answer as Markdown, every number taken from the answer
(nsysmap.report.waits.waits_answer; definitions: docs/waits.md).

`waits_section(answer)` is the report's section; `waits_lead(answer)` its first
sentence, which the brief repeats.
"""

from __future__ import annotations

from typing import Any

from nsysmap.core.inert import markdown_code
from nsysmap.core.wait_schemas import LAUNCH_OVERHEAD_NS, WAIT_KINDS
from nsysmap.report.format import ms, pct, plural, sentence, table
from nsysmap.report.waits import KIND_NAMES, LEAD_KINDS, REST, REST_KINDS
from nsysmap.waits.text import overlap_said


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
        + _long_note(answer)
        + " Kinds of wait: docs/waits.md."
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
    gap = answer.get("launch_gap_ns", LAUNCH_OVERHEAD_NS)
    devices = answer.get("devices") or 1
    if devices == 1:
        top = busiest[0]
        text = (
            f"Over {where}, the busiest stream (device {top['device_id']}, stream"
            f" {top['stream_id']}) was busy {_stream_text(top, gap)}."
        )
    else:
        each = [
            f"device {r['device_id']}, stream {r['stream_id']}, was busy {_stream_text(r, gap)}."
            for r in busiest
        ]
        more = devices - len(busiest)
        if more:
            each.append(f"{plural(more, 'more device')} not named here.")
        text = f"Over {where} ({devices:,} devices, the busiest stream of each): "
        text += " ".join([each[0], *(sentence(e) for e in each[1:])])
    return text + _outside_text(answer) + _launch_text(answer["totals"], _over_cost(answer).strip())


def _long_note(answer: dict[str, Any]) -> str:
    """What a launch gap longer than a launch means, where the first sentence names one."""
    if not any(r.get("long_launch_ns") for r in answer.get("busiest") or answer["streams"][:1]):
        return ""
    gap = ms(answer.get("launch_gap_ns", LAUNCH_OVERHEAD_NS))
    return (
        f" A launch gap over {gap} is other host work between launches (Python, data"
        " loading, computing on the CPU, a copy waited for): fewer kernels do not shorten"
        " it, and what to fix first counts only the shorter gaps as launch overhead."
    )


def _long_text(row: dict[str, Any], gap_ns: int) -> str:
    """ "; 5,850.000 ms of it in gaps over 0.250 ms, host work between launches rather than
    launch overhead": the launch-bound time that fusion and CUDA graphs do not remove by
    themselves (what to fix first counts only the shorter gaps); empty when none."""
    long = row.get("long_launch_ns") or 0
    if not long:
        return ""
    part = "all of it" if long == row["idle_launch_ns"] else f"{ms(long)} of it"
    return (
        f"; {part} in gaps over {ms(gap_ns)}, host work between launches rather than"
        " launch overhead"
    )


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


def _stream_text(row: dict[str, Any], gap_ns: int) -> str:
    """ "91.3 % of its wall time (299.849 ms); idle ..., of which ...": one stream's waits
    (`gap_ns`: the longest launch gap that is launch overhead, see `_long_text`)."""
    text = (
        f"{pct(row['busy_share'])} of its wall time ({ms(row['wall_ns'])}{_overlap_text(row)});"
        f" idle {ms(row['idle_ns'])}, of which launch-bound {ms(row['idle_launch_ns'])}"
        f" ({pct(row['idle_launch_share'])} of wall time{_long_text(row, gap_ns)}) and waiting"
        f" on synchronisations {ms(row['idle_sync_ns'])}"
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


def _overlap_text(row: dict[str, Any]) -> str:
    """ ", the summed length of its steps' windows, which overlap by 636.978 ms: ...", where
    steps run in a pipeline (nsysmap.waits.text.overlap_clause); else empty."""
    overlap = row.get("steps_overlap_ns") or 0
    if not overlap_said(overlap, row["wall_ns"]):
        return ""
    return (
        f", the summed length of its steps' windows, which overlap by {ms(overlap)}: a"
        " step's work runs on after the next step's begins, and that time counts in each"
    )


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
