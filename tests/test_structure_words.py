"""The structure's counts and the inferred blocks as the report says them (nsysmap.structure.words,
nsysmap.report.doc_sections)."""

from __future__ import annotations

import polars as pl

from nsysmap.report.doc_sections import inferred_section
from nsysmap.structure.table import STRUCTURE
from nsysmap.structure.words import region_counts


def _row(kind: str, index: int, direction: str | None, ops: int, step_index: int | None) -> dict:
    return {
        "device_id": 0,
        "pid": 1,
        "kind": kind,
        "index": index,
        "region": "measured",
        "direction": direction,
        "step_index": step_index,
        "ops": ops,
        "time_ns": 10 * ops,
        "confidence": 0.9,
    }


def test_a_pass_without_operations_is_not_counted():
    """hta_recsys: the capture began in a step's backward and optimizer phases, whose ranges
    held no operation left: "5 steps (5 forward, 6 backward and 6 optimizer passes)"."""
    rows = [
        _row("region", 0, None, 30, None),
        _row("pass", 0, "backward", 0, None),  # the cut phase ranges: nothing in them
        _row("pass", 1, "optimizer", 0, None),
        _row("step", 0, None, 30, None),
        _row("pass", 2, "forward", 10, 0),
        _row("pass", 3, "backward", 15, 0),
        _row("pass", 4, "optimizer", 5, 0),
    ]
    table = pl.DataFrame(rows).with_columns(
        [pl.lit(None).cast(t).alias(c) for c, t in STRUCTURE.items() if c not in rows[0]]
    )
    counts = region_counts(table.select(STRUCTURE.names()).cast(STRUCTURE), "measured")
    passes = {d: counts[f"{d}_passes"] for d in ("forward", "backward", "optimizer")}
    assert passes == {"forward": 1, "backward": 1, "optimizer": 1}
    assert (counts["steps"], counts["steps_with_backward"]) == (1, 1)


def test_inferred_blocks_of_the_cpu_backend_are_cpu_time():
    """zoology (torch.profiler, CPU backend: operators on no device): "Device -1: 90.9 % of
    GPU time in inferred blocks" read as GPU work; its operators' time is CPU time."""
    row = {
        "inferred_phase": "forward",
        "inferred_region": "measured",
        "inferred_block": 0,
        "ops": 3,
        "time_ns": 1_000_000,
        "time_share": 0.5,
        "top_kernel": "aten::mm",
    }
    devices = [
        {"device_id": -1, "placed_share": 0.909, "rows": [row]},
        {"device_id": 0, "placed_share": 0.5, "rows": [row]},
    ]
    text = "\n".join(inferred_section({"shown": True, "devices": devices}))
    assert "CPU operators: 90.9 % of CPU time in inferred blocks." in text
    assert "Device 0: 50.0 % of GPU time in inferred blocks." in text
    assert "Device -1" not in text
