"""The Arrow reader of usual traces (torch_arrow) gives the general reader's tables, or
declines; it never gives other tables."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from nsysmap.read.torch.torch_arrow import arrow_families
from nsysmap.read.torch.torch_events import decompressed, parse_events, split_events
from nsysmap.read.torch.torch_families import Families, from_buckets
from tests.corpus import REAL, REAL2
from tests.torch_traces import H100, flow, kernel, launch, module, op

SPANS = [  # Kineto's last events: pid and tid written as text
    {"ph": "X", "cat": "Trace", "ts": 5.0, "dur": 90.0, "pid": "Spans", "tid": "PyTorch Profiler",
     "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
    {"name": "process_sort_index", "ph": "M", "ts": 5.0, "pid": "Spans", "tid": 0,
     "args": {"sort_index": 536870912}},
    {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 95.5},
]  # fmt: skip
EPOCH = 1712195495519689.047  # microseconds since 1970, as Kineto writes them


def _events() -> list[dict[str, Any]]:
    """A small training step: operators, launches, kernels, flows, modules, threads."""
    return [
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": 100, "args": {"name": "main"}},
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": 101, "args": {}},
        {"ph": "X", "cat": "user_annotation", "name": "step 0", "pid": 1, "tid": 100,
         "ts": 10.0, "dur": 80.0},
        module("Linear_0", 11, 30, 0),
        module("Linear_0", 12, 3, 0) | {"cat": "python_function", "name": "foo.py(3): f"},
        op("aten::addmm", 12.5, 20.25, **{"External id": 4, "Sequence number": 9,
           "Input Dims": [[8, 16], [16, -4], []], "Input type": ["", "c10::BFloat16"]}),
        launch(13, 50),
        kernel("void gemm<float>(int)", 20.001, 5.125, 50, grid=[4, 2, 1], block=[128, 1, 1],
               **{"External id": 4}),
        kernel("fill", 26, 1, 51, grid=[1, None, 1], block=[], bytes=64),
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7,
         "ts": 27.5, "dur": 2, "args": {"device": 0, "stream": 7, "correlation": 52,
                                        "bytes": 4096}},
        launch(20, 51),
        launch(21, 52, api="cudaMemcpyAsync"),
        {"ph": "X", "cat": "gpu_user_annotation", "name": "step 0", "pid": 0, "tid": 7,
         "ts": 20.0, "dur": 9.0},
        op("AddmmBackward0", 40, 10, tid=101, **{"Sequence number": 9, "Fwd thread id": 1,
           "Input Dims": [[1, None], []]}),
        op("aten::mm", 51, 2, **{"Input Dims": [], "Input type": ["float", None]}),
        flow("s", 3, 12.5, 100),
        flow("f", 3, 40, 101),
        flow("s", 50, 13, 100, cat="ac2g"),
        flow("f", 50, 20.001, 7, cat="ac2g", pid=0),
        {"ph": "X", "cat": "Kernel", "name": "old_kernel", "pid": 0, "tid": 7, "ts": EPOCH,
         "dur": 3, "args": {"device": 0, "stream": 7, "correlation": 99}},
        {"ph": "C", "name": "memory", "pid": 1, "tid": 1, "ts": 3, "args": {"x": [1, "a"]}},
    ]  # fmt: skip


def _document(events: list[dict], layout: str) -> bytes:
    """A trace document as Kineto (`kineto`: indented, a few keys per line) or
    json.dumps (`compact`) writes one, with header keys after the events too."""
    if layout == "compact":
        doc = {"schemaVersion": 1, "deviceProperties": [H100], "traceEvents": events,
               "traceName": "t]x", "INFO": ["a", "b]"]}  # fmt: skip
        return json.dumps(doc).encode()
    text = ",\n".join("  " + json.dumps(e, indent=4).replace("\n", "\n  ") for e in events)
    return (
        '\n{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    '
        + json.dumps(H100)
        + '\n  ],\n  "traceEvents": [\n'
        + text
        + '\n  ],\n  "traceName": "t.json",\n  "INFO": ["x]"]\n}\n'
    ).encode()


def _general(raw: bytes) -> tuple[dict, Families]:
    header, events = parse_events(Path("t.json"), raw)
    return header, from_buckets(*split_events(events))


def _same(fast: Families, general: Families) -> None:
    for name in ("cpu", "ranges", "modules", "api", "gpu", "fwdbwd", "threads"):
        a, b = getattr(fast, name), getattr(general, name)
        assert a.schema == b.schema and a.equals(b), name
    assert fast.launch_flows().equals(general.launch_flows())
    assert (fast.gpu_annotations, fast.compute_dtype) == (
        general.gpu_annotations,
        general.compute_dtype,
    )
    assert (fast.skipped.total, fast.skipped.args_ignored) == (0, 0)
    assert (general.skipped.total, general.skipped.args_ignored) == (0, 0)


def _fast_or_declined(raw: bytes) -> bool:
    """True when the Arrow reader read `raw` (and gave the general reader's tables)."""
    fast = arrow_families(raw)
    if fast is not None:
        header, general = _general(raw)
        assert fast[0] == {**header, "traceEvents": []}  # the events are read apart
        _same(fast[1], general)
    return fast is not None


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["kineto", "compact"])
@pytest.mark.parametrize("spans", ["none", "last", "first and middle"])
def test_usual_traces_read_as_the_general_reader_reads_them(layout, spans):
    events = _events()
    if spans == "last":
        events += SPANS
    elif spans == "first and middle":
        events = SPANS[:1] + events[:5] + SPANS + events[5:]
    fast = arrow_families(_document(events, layout))
    assert fast is not None  # the usual trace takes the fast path
    assert _fast_or_declined(_document(events, layout))
    assert fast[1].gpu.height == 4 and fast[1].threads.height == 2
    assert fast[1].compute_dtype == "bf16"  # of equal counts, the first seen
    assert fast[1].cpu["input_shapes"].to_list() == ["[[8, 16], [16, -4], []]", None, "[]"]


def _with(index: int, **changes: Any) -> list[dict]:
    events = _events()
    events[index] = {**events[index], **changes}
    return events


def _without(index: int, key: str) -> list[dict]:
    events = _events()
    events[index] = {k: v for k, v in events[index].items() if k != key}
    return events


def _args(index: int, **changes: Any) -> list[dict]:
    events = _events()
    events[index] = {**events[index], "args": {**events[index].get("args", {}), **changes}}
    return events


DECLINED = {  # each one the general reader reads another way, so the fast one declines
    "shapes of a tensor list": _args(5, **{"Input Dims": [[8, 16], [[1], [2]]]}),
    "an exponent time": _with(7, ts=123456.5),  # written 1.712195495519689047e15 below
    "a negative time": _with(7, ts=-EPOCH),
    "a time at the limit": _with(7, ts=9e15),
    "a time beyond 64 bits": _with(7, ts=2**70),
    "a time of 35 digits": _with(7, dur=10**34),
    "a kernel without dur": _without(7, "dur"),
    "a kernel named null": _with(7, name=None),
    "an operator without tid": _with(5, tid=None),
    "a flow id as text": _with(15, id="0x3"),
    "args not an object": _with(5, args=[1]),
    "an old external id": _args(7, **{"external id": 4}),
    "a device as text": _args(7, device="cuda:0"),
    "a thread name event without pid": _with(0, pid=None),
}  # fmt: skip


@pytest.mark.parametrize("layout", ["kineto", "compact"])
@pytest.mark.parametrize("case", sorted(DECLINED))
def test_what_the_general_reader_reads_another_way_is_declined(case, layout):
    raw = _document(DECLINED[case] + SPANS, layout)
    raw = raw.replace(b"123456.5", b"1.712195495519689047e15")  # a float to the general reader
    assert not _fast_or_declined(raw)


def test_a_separator_inside_an_event_is_never_read_as_two_events():
    events = _args(5, nested=[{"a": 1}, {"b": 2}])  # "}, {" in json.dumps' layout
    assert not _fast_or_declined(_document(events, "compact"))


@pytest.mark.parametrize(
    "damage",
    [
        (b"}, {", b"} {"),  # two events without a comma
        (b'"ts": 10.0', b'"ts": 10.0, "ts": 11.0'),  # a key twice (json keeps the last)
        (b'"name": "main"', b'"name": "ma\x01in"'),  # a control character in a string
        (b'"traceName"', b'"traceEvents": [], "traceName"'),  # the key twice
    ],
)
def test_damaged_or_ambiguous_text_is_declined(damage):
    raw = _document(_events(), "compact")
    assert damage[0] in raw
    assert arrow_families(raw.replace(damage[0], damage[1], 1)) is None


def _corpus_traces() -> list[Path]:
    found = []
    for folder in (REAL, REAL2):
        catalogue = folder / "catalogue.json"
        if catalogue.is_file():
            entries = json.loads(catalogue.read_text())
            entries = entries["files"] if isinstance(entries, dict) else entries
            found += [folder / e["file"] for e in entries if e["format"] == "kineto-json"]
    return found


@pytest.mark.corpus
def test_real_traces_read_as_the_general_reader_reads_them():
    traces = _corpus_traces()
    if not traces:
        pytest.skip(f"the real-profile corpus is not at {REAL}")
    fast = {p.name for p in traces if _fast_or_declined(decompressed(p))}
    assert "hta_ddp_ns_resolution_rank0_v100.json.gz" in fast  # the benchmark's trace


def test_gzipped_and_plain_read_alike(tmp_path):
    raw = _document(_events() + SPANS, "kineto")
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(raw, mtime=0))
    fast = arrow_families(decompressed(path))
    assert fast is not None
    _same(fast[1], _general(raw)[1])
    assert isinstance(fast[1].gpu, pl.DataFrame)
