"""The structure's counts and the inferred blocks as the report says them (nsysmap.structure.words,
nsysmap.report.doc_sections), and the unit of the structure lines' times in every renderer."""

from __future__ import annotations

import html
from dataclasses import replace
from pathlib import Path

import polars as pl

from nsysmap.flow.analysis import Analysis
from nsysmap.flow.verbs import analyse, load_profile, write
from nsysmap.infer.label import Found
from nsysmap.infer.motif import Region
from nsysmap.infer.summary import Inferred
from nsysmap.report.build import build_report
from nsysmap.report.doc_sections import inferred_section
from nsysmap.report.html.chart import code_spans
from nsysmap.report.html.page import report_page
from nsysmap.report.report_files import read_run
from nsysmap.structure.table import STRUCTURE
from nsysmap.structure.words import region_counts, region_line
from tests.frames import Frames
from tests.torch_traces import complete, op, write_trace


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


def test_a_region_line_says_what_its_time_is():
    """A region's time is its operations' summed time, not its wall time: the line says
    GPU time, or CPU operator self time for a trace without GPU work."""
    counts = {
        "region": "measured",
        "ops": 4,
        "time_ns": 309_000,
        "name": "ProfilerStep#6",
        "evidence": ["range"],
        "confidence": 0.95,
        "forward_passes": 1,
        "backward_passes": 0,
        "optimizer_passes": 0,
        "steps": 1,
    }
    held = "measured: 1 step (1 forward pass) inside `ProfilerStep#6`, 0.309 ms of "
    assert region_line(counts, 309_000, cpu=False) == (
        held + "GPU time (100.0 % of all); from the range; confidence 0.95"
    )
    assert region_line(counts, 618_000, cpu=True) == (
        held + "CPU operator self time (50.0 % of all); from the range; confidence 0.95"
    )


def _said_everywhere(analysis: Analysis, out: Path) -> list[str]:
    """The structure lines of the terminal summary, after checking that answers.json,
    report.md and the HTML page say the same."""
    write(analysis, out)
    result = build_report(read_run(out))
    lines = result.answers["structure"]["lines"]
    said = analysis.summary_text.split("\nStructure: ")[1].split("\n\n")[0].splitlines()
    assert [line.strip() for line in said] == lines
    section = result.markdown.split("## Structure of the profile\n\n")[1].split("\n\n")[0]
    assert section.splitlines() == [f"- {line[:1].upper()}{line[1:]}" for line in lines]
    page = report_page(result.findings)
    assert all(code_spans(html.escape(line[:1].upper() + line[1:])) in page for line in lines)
    return lines


def test_the_structure_of_a_gpu_profile_is_in_gpu_time(tmp_path):
    f = Frames()
    f.range(1, "forward", 1, 9)
    f.kernel(1, 2, "ampere_sgemm_128x64_tn", dur=2)
    assert _said_everywhere(analyse(f.profile()), tmp_path / "out") == [
        "measured: 1 forward pass, 2.000 ms of GPU time (100.0 % of all); from the range; "
        "confidence 1.00"
    ]


def test_the_structure_of_a_trace_without_gpu_work_is_in_cpu_operator_self_time(tmp_path):
    """zoology (torch.profiler, no GPU events): its times are CPU operators' self times, and
    "9.154 ms (100.0 % of all)" read as GPU time."""
    events = [complete("user_annotation", "ProfilerStep#1", 0, 100)]
    events += [complete("user_annotation", "forward", 1, 98)]
    events += [op("aten::mm", 2 + 10 * i, 8) for i in range(4)]
    trace = write_trace(tmp_path / "trace.json", events, deviceProperties=[])
    assert _said_everywhere(analyse(load_profile(trace)), tmp_path / "out") == [
        "measured: 1 step (1 forward pass) inside `ProfilerStep#1`, 0.032 ms of CPU operator "
        "self time (100.0 % of all); from the range; confidence 1.00"
    ]


def test_inferred_lines_name_operators_and_their_time():
    """The terminal summary's inferred line of a trace without GPU work counts operators in
    CPU operator self time (zoology read "147 kernels per pass; 91% of GPU time")."""
    blocks = pl.DataFrame(
        {"device_id": [-1, -1], "inferred_block": [0, None], "inferred_region": ["m", "m"]}
        | {"time_share": [0.91, 0.09]}
    )
    agree = pl.DataFrame(schema={"device_id": pl.Int64, "measured_ns": pl.Int64})
    found = Found(-1, 1, None, (Region(0, 147, 8),), confidence=1.0)
    inferred = Inferred(pl.DataFrame(), blocks, (found,), agree)
    cpu, gpu = inferred.lines(cpu=True)[0], inferred.lines(cpu=False)[0]
    assert "8 repeating blocks of 147 operators per pass; 91% of CPU operator self time" in cpu
    assert "8 repeating blocks of 147 kernels per pass; 91% of GPU time" in gpu
    # mmagic: a block whose motif holds a copy counted it among "23 kernels"
    copied = Inferred(pl.DataFrame(), blocks, (replace(found, copies=(True,)),), agree)
    assert "8 repeating blocks of 147 operations per pass" in copied.lines(cpu=False)[0]
    assert "147 operators per pass" in copied.lines(cpu=True)[0]  # no copies on a CPU


def test_a_trace_without_gpu_work_is_found_from_its_operator_sequence():
    counts = {
        "region": "measured",
        "name": None,
        "ops": 3,
        "time_ns": 1_000_000,
        "evidence": ["kernel_sequence", "range"],
        "confidence": 1.0,
        "forward_passes": 1,
        "backward_passes": 0,
        "optimizer_passes": 0,
        "steps": 0,
    }
    assert "; from the operator sequence, the range;" in region_line(counts, 0, cpu=True)
    assert "; from the kernel sequence, the range;" in region_line(counts, 0, cpu=False)


def test_passes_of_several_devices_say_so():
    """fastvideo: "Measured: 2 forward passes" were one pass on each of its 2 GPUs."""
    counts = {
        "region": "measured",
        "name": None,
        "ops": 10,
        "time_ns": 2_000_000,
        "evidence": ["kernel_sequence"],
        "confidence": 1.0,
        "forward_passes": 2,
        "backward_passes": 0,
        "optimizer_passes": 0,
        "steps": 0,
        "devices": 2,
    }
    line = region_line(counts, 2_000_000, cpu=False)
    assert line.startswith("measured: 2 forward passes on 2 devices, 2.000 ms of GPU time")
    one = region_line({**counts, "devices": 1}, 2_000_000, cpu=False)
    assert one.startswith("measured: 2 forward passes, 2.000 ms")


def test_a_region_with_work_outside_its_passes_says_how_much_the_passes_hold():
    """vLLM decode (torch.profiler): "1 forward pass inside `execute_…`, 10.718 ms" beside
    the pass's own 10.675 ms elsewhere in the report: the region holds the input copies
    before the pass. The line says both."""
    counts = {
        "region": "measured",
        "name": None,
        "ops": 434,
        "time_ns": 10_717_708,
        "evidence": ["kernel_sequence"],
        "confidence": 1.0,
        "forward_passes": 1,
        "backward_passes": 0,
        "optimizer_passes": 0,
        "steps": 0,
        "held_ns": 10_674_517,
    }
    line = region_line(counts, 10_717_708, cpu=False)
    assert "10.718 ms of GPU time (100.0 % of all; 10.675 ms in the pass);" in line
    steps = {**counts, "steps": 3, "forward_passes": 3}
    assert "(100.0 % of all; 10.675 ms in the steps);" in region_line(steps, 10_717_708, cpu=False)
    # The same time as printed, more (a step running past the region's end), or none:
    # nothing more said.
    for held in (10_717_900, 10_800_000, 0):
        line = region_line({**counts, "held_ns": held}, 10_717_708, cpu=False)
        assert "(100.0 % of all);" in line
    # A set-up region holds no pass: nothing more said.
    setup = region_line({**counts, "region": "setup", "forward_passes": 0}, 10_717_708, cpu=False)
    assert "in the pass" not in setup


def test_region_counts_hold_the_steps_time_else_the_passes():
    rows = [
        _row("region", 0, None, 40, None),
        _row("pass", 0, "forward", 10, None),
        _row("pass", 1, "backward", 15, None),
    ]
    table = pl.DataFrame(rows).with_columns(
        [pl.lit(None).cast(t).alias(c) for c, t in STRUCTURE.items() if c not in rows[0]]
    )
    table = table.select(STRUCTURE.names()).cast(STRUCTURE)
    assert region_counts(table, "measured")["held_ns"] == 250  # the passes: 10 * (10 + 15)
    stepped = pl.concat(
        [
            table,
            table.filter(pl.col("kind") == "region").with_columns(
                kind=pl.lit("step"), ops=pl.lit(30, pl.Int64), time_ns=pl.lit(300, pl.Int64)
            ),
        ]
    )
    assert region_counts(stepped, "measured")["held_ns"] == 300  # the step's
    # A second process with passes and no step: its passes count beside the steps.
    other = table.filter(pl.col("kind") == "pass").with_columns(pid=pl.lit(2, pl.Int64))
    mixed = pl.concat([stepped, other])
    assert region_counts(mixed, "measured")["held_ns"] == 300 + 250
