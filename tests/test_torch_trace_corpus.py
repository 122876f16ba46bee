"""The torch.profiler reader on real traces (the `kineto-json` files of ../shared/corpus/real).

Expected values come from the JSON read here with the standard library
(Decimal arithmetic, stack walks), never from nsysmap's own code. The tests
skip, with the reason shown, when the corpus is absent.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import ROUND_HALF_UP, Decimal
from functools import cache
from pathlib import Path

import polars as pl
import pytest

from nsysmap.flow.verbs import Analysis, analyse_file
from nsysmap.report.build import build_report
from nsysmap.report.report_files import read_run

pytestmark = pytest.mark.corpus  # the real traces of ../shared/corpus

REAL = (Path(__file__).parents[1] / ".." / "shared" / "corpus" / "real").resolve()
_ABSENT = f"the real-profile corpus is not at {REAL}"
GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
LAUNCH_CATEGORIES = {"cuda_runtime", "cuda_driver", "Runtime"}
DDP = "hta_ddp_ns_resolution_rank0_v100.json.gz"


def _traces() -> list[str]:
    catalogue = REAL / "catalogue.json"
    if not catalogue.is_file():
        return ["<corpus absent>"]
    entries = json.loads(catalogue.read_text())
    entries = entries["files"] if isinstance(entries, dict) else entries
    return [e["file"] for e in entries if e.get("format") == "kineto-json"]


TRACES = _traces()
MODULE_TRACES = [t for t in TRACES if t.startswith("tracelens_")]


@cache
def _events(name: str) -> tuple[dict, ...]:
    path = REAL / name
    if not path.is_file():
        pytest.skip(_ABSENT if not REAL.is_dir() else f"{name} is not in the corpus")
    with gzip.open(path) as f:
        return tuple(json.load(f, parse_float=Decimal)["traceEvents"])


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    done: dict[str, Analysis] = {}

    def run(name: str) -> Analysis:
        _events(name)  # skips when absent
        if name not in done:
            out = tmp_path_factory.mktemp(name.split(".")[0])
            done[name] = analyse_file(REAL / name, out, options={"command": "attribute"})
        return done[name]

    return run


def _ns(us) -> int:
    return int((Decimal(us) * 1000).quantize(Decimal(1), ROUND_HALF_UP))


def _gpu_totals(events) -> dict[int, tuple[int, int]]:
    """device -> (ops, ns) over kernels, copies and sets; GPU-side annotations left out."""
    totals: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES:
            device = e["args"].get("device", e["args"].get("inDevice", e["pid"]))
            totals[device][0] += 1
            totals[device][1] += _ns(e["dur"])
    return {d: tuple(v) for d, v in totals.items()}


@pytest.mark.parametrize("name", TRACES)
def test_gpu_time_conserved_exactly(analysed, name):
    expected = _gpu_totals(_events(name))
    ops = analysed(name).ops
    got = ops.group_by("device_id").agg(pl.len(), pl.col("dur_ns").sum()).rows()
    assert {d: (n, t) for d, n, t in got} == expected
    annotations = sum(e.get("cat") == "gpu_user_annotation" for e in _events(name))
    assert analysed(name).profile.meta_value("gpu_user_annotations") == str(annotations)


def _stack_walk(events, keep) -> dict[tuple, list[str]]:
    """(tid, ts) of each launch call -> names of the module frames around it, outermost first."""
    spans = [
        e for e in events if e.get("ph") == "X" and (e.get("cat") in LAUNCH_CATEGORIES or keep(e))
    ]
    spans.sort(key=lambda e: (str(e["tid"]), Decimal(e["ts"]), -Decimal(e["dur"])))
    stack, around = [], {}
    for e in spans:
        start = Decimal(e["ts"])
        while stack and (stack[-1][0] != e["tid"] or stack[-1][1] <= start):
            stack.pop()
        if e["cat"] in LAUNCH_CATEGORIES:
            around[e["args"].get("correlation")] = [s[2] for s in stack]
        else:
            stack.append((e["tid"], start + Decimal(e["dur"]), e["name"]))
    return around


def _is_module_frame(e: dict) -> bool:
    return e.get("cat") == "python_function" and e["name"].startswith("nn.Module: ")


@pytest.mark.parametrize("name", MODULE_TRACES)
def test_kernels_get_the_module_frames_around_their_launch(analysed, name):
    events = _events(name)
    around = _stack_walk(events, _is_module_frame)
    ops = analysed(name).ops.filter(pl.col("launch_api").is_not_null())
    expected = [
        ".".join(f.removeprefix("nn.Module: ") for f in around[c]) or None
        for c in ops["correlation_id"]
    ]
    assert ops["module"].to_list() == expected
    kernels = ops.filter(pl.col("kind") == "kernel")
    with_module = kernels.filter(pl.col("module").is_not_null())["dur_ns"].sum()
    assert with_module >= 0.95 * kernels["dur_ns"].sum()


@pytest.mark.parametrize("name", MODULE_TRACES)
def test_by_module_names_every_layer(analysed, name):
    layers = {
        e["name"].removeprefix("nn.Module: ")
        for e in _events(name)
        if _is_module_frame(e) and e["name"].split("_")[0].endswith("Layer")
    }
    by_module = analysed(name).summaries.by_module.drop_nulls("module")
    parts = {p for m in by_module["module"] for p in m.split(".")}
    assert len(layers) >= 4 and layers <= parts
    classes = {e["name"].removeprefix("nn.Module: ").rsplit("_", 1)[0] for e in _events(name)
               if _is_module_frame(e)}  # fmt: skip
    assert set(by_module["module_class"]) <= classes


def test_report_on_a_module_trace_has_module_flops(analysed):
    name = "tracelens_bert_small_infer_modules_h100.json.gz"
    result = build_report(read_run(analysed(name).out_dir))
    layers = result.tables["report_layers"].filter(pl.col("matmul_flop") > 0)
    assert layers["modules"].sum() >= 20 and layers["mfu"].null_count() == 0
    # the four BertLayer instances are one layer (nsysmap.attribution.module_names)
    assert layers["layer"].str.contains(".BertLayer_*.", literal=True).any()
    assert not layers["layer"].str.contains(r"\.BertLayer_\d+\.").any()
    assert result.tables["report_shapes"].height > 0


def test_ddp_phases_cover_gpu_time(analysed):
    ops = analysed(DDP).ops
    total = ops["dur_ns"].sum()
    assert ops.filter(pl.col("phase").is_not_null())["dur_ns"].sum() >= 0.95 * total
    assert set(ops["phase"].drop_nulls()) == {"forward", "backward", "optimizer"}
    assert set(ops["rank"]) == {0}
    assert analysed(DDP).profile.meta_value("world_size") == "1"


def _ddp_backward_links(events) -> dict[int, tuple[int, bool]]:
    """Correlation id of each launch under a backward operator -> (the sequence number of
    its forward operator, whether that operator ran inside `## forward ##`).

    The backward operator is the innermost one around the launch that ends a
    fwdbwd flow (its forward operator: the flow's start) or that records
    "Fwd thread id" > 0 (its forward operator: the first with its sequence number).
    """
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    at = {(e["tid"], e["ts"]): e for e in sorted(ops, key=lambda e: -e["dur"])}
    first_forward = {}
    for e in sorted(ops, key=lambda e: e["ts"]):
        if "Sequence number" in e["args"] and not e["args"].get("Fwd thread id"):
            first_forward.setdefault(e["args"]["Sequence number"], e)
    source = {id(e): first_forward.get(e["args"]["Sequence number"]) for e in ops
              if e["args"].get("Fwd thread id")}  # fmt: skip
    flows = {(e["ph"], e["id"]): (e["tid"], e["ts"]) for e in events if e.get("cat") == "fwdbwd"}
    for (ph, flow_id), where in flows.items():
        if ph == "f" and ("s", flow_id) in flows:
            source[id(at[where])] = at[flows[("s", flow_id)]]
    forward = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "## forward ##"]
    links = {}
    for correlation, enclosing in _stack_walk_ops(events).items():
        found = [source[id(op)] for op in enclosing if source.get(id(op)) is not None]
        if found:
            fwd = found[-1]
            inside = any(a <= fwd["ts"] < b for a, b in forward)
            links[correlation] = (fwd["args"]["Sequence number"], inside)
    return links


def _stack_walk_ops(events) -> dict[int, list[dict]]:
    """Correlation id of each launch call -> the CPU operators around it, outermost first."""
    spans = [
        e for e in events if e.get("ph") == "X" and e.get("cat") in LAUNCH_CATEGORIES | {"cpu_op"}
    ]
    spans.sort(key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    stack, around = [], {}
    for e in spans:
        while stack and (
            stack[-1]["tid"] != e["tid"] or stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]
        ):
            stack.pop()
        if e["cat"] in LAUNCH_CATEGORIES:
            around[e["args"].get("correlation")] = list(stack)
        else:
            stack.append(e)
    return around


def test_ddp_backward_kernels_reach_their_forward_operators(analysed):
    links = _ddp_backward_links(_events(DDP))
    backward = analysed(DDP).ops.filter(pl.col("phase") == "backward")
    stashed = backward["range_path"].str.extract_all(r"stashed seq = \d+").list.last()
    got = stashed.str.extract(r"(\d+)$").cast(pl.Int64)
    want = [links.get(c, (None, False)) for c in backward["correlation_id"]]
    seq = pl.Series([w[0] for w in want], dtype=pl.Int64)
    assert (got.filter(seq.is_not_null()) == seq.drop_nulls()).all()
    linked = backward.filter(seq.is_not_null())["dur_ns"].sum()
    in_forward = backward.filter(pl.Series([w[1] for w in want]))["dur_ns"].sum()
    assert linked >= 0.95 * backward["dur_ns"].sum()
    assert in_forward >= 0.9 * backward["dur_ns"].sum()
    flows = sum(e.get("cat") == "fwdbwd" and e["ph"] == "s" for e in _events(DDP))
    assert analysed(DDP).profile.meta_value("fwdbwd_flows") == str(flows) == "905"
