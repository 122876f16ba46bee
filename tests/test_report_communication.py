"""The report's communication answer: per collective and phase, hidden and exposed, one-off apart.

A synthetic export plants a one-off broadcast before the first step and
per-step all-reduces hidden by known amounts; the real distributed profiles
are checked against a recomputation written here (plain Python: the
collective from the kernel name or its `nccl:` annotation, hidden time by a
sweep, one-off by the first step's start).
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from devtools.synth import SynthExport
from nsysmap.flow.verbs import analyse, load_profile
from nsysmap.report.communication import communication_answer, communication_section
from nsysmap.report.format import ms, pct
from tests.corpus import corpus_path
from tests.test_comm_hidden import DISTRIBUTED, hidden_by_hand

MS = 1_000_000
PID, MAIN = 7, 70
BROADCAST = "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SEND_RECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
ROW = ("collective", "phase", "in_steps", "one_off", "calls", "time_ns", "hidden_ns", "exposed_ns")


def _planted_export() -> SynthExport:
    """Steps 1 [10, 30) and 2 [30, 50) ms, each with a backward range from 15 and 35.

    Before step 1: a 8 ms broadcast, 3 ms of it under a gemm on another stream.
    Each step: an 8 ms all-reduce in backward, hidden 2 ms (step 1) and 4 ms (step 2).
    Step 2 also: a SendRecv inside `nccl:all_to_all` (backward) and a bare SendRecv
    (before backward). After the last step: a 2 ms all-reduce, nothing hides it.
    """
    b = SynthExport()
    b.range(PID, MAIN, 10, 30, "nsysmap:step:1")
    b.range(PID, MAIN, 15, 30, "backward")
    b.range(PID, MAIN, 30, 50, "nsysmap:step:2")
    b.range(PID, MAIN, 35, 50, "backward")
    b.range(PID, MAIN, 37, 37.8, "nccl:all_to_all")
    kernels = [
        # (launch at, stream, start, end, name)
        (0.2, 7, 2, 5, "gemm_a"),
        (0.5, 20, 1, 9, BROADCAST),
        (10.5, 7, 11, 13, "gemm_b"),
        (15.5, 7, 18, 22, "gemm_c"),
        (16, 20, 20, 28, ALL_REDUCE),
        (32, 21, 32, 33, SEND_RECV),
        (35.5, 7, 44, 50, "gemm_d"),
        (36, 20, 40, 48, ALL_REDUCE),
        (37.2, 21, 38, 39, SEND_RECV),
        (52, 20, 52, 54, ALL_REDUCE),
    ]
    for corr, (at, stream, start, end, name) in enumerate(kernels, start=1):
        b.launch(PID, MAIN, at, at + 0.1, corr)
        b.kernel(PID, 0, stream, start, end, corr, name=name)
    return b


def _rows(rows: list[dict]) -> set[tuple]:
    return {tuple(r[k] for k in ROW) for r in rows}


@pytest.mark.slow
def test_planted_one_off_broadcast_and_hidden_all_reduces(tmp_path: Path) -> None:
    path = _planted_export().write(tmp_path / "ddp.sqlite")
    answer = communication_answer(analyse(load_profile(path), infer=False).ops)
    assert answer["unknown"] is None
    assert _rows(answer["one_off"]) == {("broadcast", None, False, True, 1, 8 * MS, 3 * MS, 5 * MS)}
    assert _rows(answer["collectives"]) == {
        ("all_reduce", "backward", True, False, 2, 16 * MS, 6 * MS, 10 * MS),
        ("all_to_all", "backward", True, False, 1, 1 * MS, 0, 1 * MS),
        ("send_recv", None, True, False, 1, 1 * MS, 0, 1 * MS),
        ("all_reduce", None, False, False, 1, 2 * MS, 0, 2 * MS),
    }
    assert answer["totals"] == {
        "time_ns": 28 * MS,
        "hidden_ns": 9 * MS,
        "exposed_ns": 19 * MS,
        "calls": 6,
        "hidden_share": 9 / 28,
        "exposed_share": 19 / 28,
    }
    text = "\n".join(communication_section(answer))
    assert "One-off communication before the first step" in text and "broadcast 8.000 ms" in text
    assert "| `all_reduce` | backward | in steps | 2 | 16.000 ms | 6.000 ms | 10.000 ms |" in text
    # In a step but before its backward range: named as every table names it (DLRM had –).
    assert "| `send_recv` | (outside every phase) | in steps | 1 |" in text
    assert "| – |" not in text


def _numbers_of(answer: dict) -> set[str]:
    """Every number the Markdown may show: the answer's values, as ms, counts and shares."""
    rows = [answer["totals"], *answer["collectives"], *answer["one_off"], *answer["left_out"]]
    out = set()
    for row in rows:
        for key, value in row.items():
            if key.endswith("_ns"):
                out.add(ms(value).split()[0])
                if row.get("time_ns"):
                    out.add(pct(value / row["time_ns"]).split()[0])
            elif key == "calls":
                out.add(f"{value:,}")
    return out


@pytest.mark.slow
def test_every_number_of_the_markdown_comes_from_the_answer(tmp_path: Path) -> None:
    path = _planted_export().write(tmp_path / "ddp.sqlite")
    answer = communication_answer(analyse(load_profile(path), infer=False).ops)
    answer["left_out"] = [{"what": "CUDA graph replays", "time_ns": 1_234_567, "why": "seen whole"}]
    text = "\n".join(communication_section(answer))
    # Numbers in the text, leaving out those inside names (`all_reduce`, step numbers: none).
    shown = set(re.findall(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?![\w.])", text))
    assert shown and shown <= _numbers_of(answer), shown - _numbers_of(answer)
    assert "1.235 ms" in text  # the left-out line


def test_no_communication_is_unknown_with_its_reason() -> None:
    ops = pl.DataFrame(
        {
            "kind": ["kernel", "cpu_op"],
            "category": ["gemm", "communication"],
            "pid": [1, 1],
            "device_id": [0, -1],
            "stream_id": [7, 3],
            "start_ns": [0, 0],
            "end_ns": [10, 5],
            "dur_ns": [10, 5],
            "step": [None, None],
            "phase": [None, None],
            "name": ["gemm", "c10d::allreduce_"],
            "range_path": [None, None],
        },
        schema_overrides={"step": pl.Int64, "phase": pl.String, "range_path": pl.String},
    )
    answer = communication_answer(ops.head(1))
    assert (
        answer["unknown"] == "this profile has no communication kernels (NCCL or other collectives)"
    )
    assert answer["totals"]["calls"] == 0 and answer["collectives"] == answer["left_out"] == []
    # No kernel, nothing that could hide one: the answer is none, not "not known".
    assert communication_section(answer) == [
        "## Communication",
        "",
        f"None: {answer['unknown']}, so no GPU time went to it in this capture.",
        "",
    ]
    cpu_only = communication_answer(ops)
    assert communication_section(cpu_only)[2] == f"Not known: {cpu_only['unknown']}."
    assert cpu_only["unknown"].endswith("its communication is not GPU kernels")
    assert [(x["what"], x["time_ns"]) for x in cpu_only["left_out"]] == [
        ("communication operations of kind cpu_op", 5)
    ]


# ------------------------------------------------------------------ real profiles
KERNEL_WORDS = {"AllReduce": "all_reduce", "Broadcast": "broadcast"}
ANNOTATIONS = {
    "all_to_all": "all_to_all",
    "all_reduce": "all_reduce",
    "_reduce_scatter_base": "reduce_scatter",
    "_all_gather_base": "all_gather",
}


def _collective_by_hand(name: str, path: str | None) -> str:
    word = re.search(r"Kernel_([A-Za-z]+)", name)
    assert word, name
    if word.group(1) != "SendRecv":
        return KERNEL_WORDS[word.group(1)]
    annotations = re.findall(r"nccl:(\w+)", path or "")
    return ANNOTATIONS[annotations[-1]] if annotations else "send_recv"


def _answer_by_hand(ops: pl.DataFrame) -> tuple[dict[tuple, list[int]], dict[tuple, int]]:
    """(collective, phase, in_steps, one_off) -> [calls, time, hidden, exposed]; and the
    first step start per (pid, device)."""
    first: dict[tuple, int] = {}
    for pid, device, step, start in ops.select("pid", "device_id", "step", "start_ns").rows():
        if step is not None:
            first[(pid, device)] = min(start, first.get((pid, device), start))
    kernels = hidden_by_hand(ops)
    extra = ops.filter(pl.col("kind") == "kernel", pl.col("category") == "communication")
    out: dict[tuple, list[int]] = {}
    named = extra.select("phase", "name", "range_path").rows()
    for k, (phase, name, path) in zip(kernels, named, strict=True):
        before = k["step"] is None and k["start_ns"] < first.get((k["pid"], k["device_id"]), -1)
        key = (_collective_by_hand(name, path), phase, k["step"] is not None, before)
        sums = out.setdefault(key, [0, 0, 0, 0])
        for i, value in enumerate((1, k["dur_ns"], k["hidden_ns"], k["dur_ns"] - k["hidden_ns"])):
            sums[i] += value
    return out, first


@pytest.mark.corpus
@pytest.mark.parametrize("name", DISTRIBUTED)
def test_real_profiles_against_a_recomputation(name: str) -> None:
    analysis = analyse(load_profile(corpus_path(name)), infer=False)
    answer = communication_answer(analysis.ops)
    expected, _ = _answer_by_hand(analysis.ops)
    rows = [*answer["collectives"], *answer["one_off"]]
    assert {tuple(r[k] for k in ROW[:4]): [r[k] for k in ROW[4:]] for r in rows} == expected
    assert all(not r["one_off"] for r in answer["collectives"])
    assert all(r["one_off"] for r in answer["one_off"])
    categories = analysis.summaries.by_category.filter(pl.col("category") == "communication")
    assert answer["totals"]["time_ns"] == categories["time_ns"].sum()
    if name.startswith("hta_ddp"):  # world size 1: nccl: annotations, no NCCL kernel
        assert answer["unknown"] and not rows
    else:
        assert answer["unknown"] is None and rows
    kinds = {r["collective"] for r in rows}
    if name.startswith("hta_recsys"):  # SendRecv kernels named by their annotations
        assert {"all_reduce", "all_to_all", "reduce_scatter", "all_gather"} <= kinds
    if name.startswith("param_dlrm"):
        assert kinds == {"all_reduce", "all_to_all"}
