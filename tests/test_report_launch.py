"""The launcher's FLOP document (DIR/flops.json), and GPT-2 shapes and FLOPs end to end."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import instrument
from instrument import launch
from nsysmap.flops.flops_document import attach_model_flops, load_flops
from nsysmap.flow.verbs import analyse, analyse_file, load_profile, write
from nsysmap.report.answers import ReportOptions
from nsysmap.report.build import build_report
from nsysmap.report.report_files import read_run

pytestmark = pytest.mark.slow  # real launcher runs

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "train_gpt2.py"

# argv: mode (train | infer | kwarg | opaque | dataparallel | dataparallel_compiled)
SCRIPT = """
import sys
import torch

class Opaque(torch.nn.Module):  # its forward needs real data: fake tensors cannot run it
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x) * float(x.sum().item() > 0)

class Keyword(torch.nn.Sequential):  # called as model(x=...)
    def forward(self, x):
        return super().forward(x)

mode = sys.argv[1]
torch.manual_seed(0)
layers = (torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
model = {"opaque": Opaque, "kwarg": lambda: Keyword(*layers)}.get(
    mode, lambda: torch.nn.Sequential(*layers)
)()
if mode == "dataparallel":  # on the CPU, DataParallel calls the model it wraps
    model = torch.nn.DataParallel(model)
if mode == "dataparallel_compiled":  # nanoGPT's order: compiled, then wrapped
    model = torch.nn.DataParallel(torch.compile(model, backend="eager"))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    x = torch.randn(2, 4)
    if mode == "infer":
        with torch.no_grad():
            model(x)
        continue
    opt.zero_grad()
    (model(x=x) if mode == "kwarg" else model(x)).sum().backward()
    opt.step()
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train_tiny.py"
    path.write_text(SCRIPT)
    return path


def launched(out: Path, script: Path, mode: str, *opts: str) -> tuple[dict, dict | None]:
    argv = ["--backend", "torch", "--out", str(out), "--warmup-steps", "0", *opts, str(script)]
    assert launch.main([*argv, mode]) == 0
    assert instrument.active() is None
    record = json.loads((out / "launch.json").read_text())
    doc_path = out / "flops.json"
    return record, json.loads(doc_path.read_text()) if doc_path.is_file() else None


def matmul(doc: dict, direction: str) -> int:
    return sum(r["matmul_flop"] for r in doc["rows"] if r["direction"] == direction)


def test_launcher_counts_the_model_it_profiled(tmp_path, script):
    record, doc = launched(tmp_path / "out", script, "train")
    assert record["flops"] == "flops.json" and record["notes"] == []
    assert (doc["input_shape"], doc["input_dtype"], doc["backward"]) == ([2, 4], "float32", True)
    assert (doc["compute_dtype"], doc["source"], doc["model_class"]) == (
        "float32",
        "instrument.launch",
        "Sequential",
    )
    # Linear(4, 8) and Linear(8, 1) on 2 rows: 2·2·4·8 + 2·2·8·1 forward;
    # backward: the weight gradients (same) plus the input gradient of the second layer.
    assert matmul(doc, "forward") == 128 + 32
    assert matmul(doc, "backward") == 128 + 32 + 32


@pytest.mark.parametrize("mode", ["dataparallel", "dataparallel_compiled"])
def test_a_data_parallel_model_is_counted_under_the_names_its_kernels_carry(tmp_path, script, mode):
    """Inside DataParallel (or DistributedDataParallel) the model is the wrapper's child
    `module`: the FLOPs of `0` are those of the ranges' `module.0` (a compiled model in
    it too: no `_orig_mod`, as the ranges name its modules), and the time per module
    meets its FLOPs (checked eager: compiled on the CPU, the modules inside the graph
    open no ranges)."""
    capture = tmp_path / "run" / "capture"
    record, doc = launched(capture, script, mode)
    assert record["flops"] == "flops.json" and doc["model_class"] == "Sequential"
    assert [(m["module"], m["module_class"]) for m in doc["modules"]] == [
        ("", "DataParallel"),
        ("module", "Sequential"),
        ("module.0", "Linear"),
        ("module.1", "ReLU"),
        ("module.2", "Linear"),
    ]
    assert matmul(doc, "forward") == 128 + 32 and matmul(doc, "backward") == 128 + 32 + 32
    counted = {r["module"] for r in doc["rows"] if r["matmul_flop"]}
    assert counted == {"module.0", "module.2"}
    assert {m["module"] for m in doc["flop_counter"]["modules"]} >= {"module", "module.0"}
    if mode == "dataparallel_compiled":
        return
    out = tmp_path / "run"
    write(attach_model_flops(analyse(load_profile(capture / "trace.json")), capture), out)
    ops = pl.read_parquet(out / "ops.parquet")
    assert counted <= set(ops["module"].drop_nulls())
    rows = build_report(read_run(out), options=ReportOptions(flops="model")).tables
    timed = rows["report_module_phase"].filter(pl.col("module").is_in(list(counted)))
    assert set(timed["flop_source"]) == {"model"}, timed
    # The model's FLOPs of the profiled steps reach the modules that ran them.
    assert timed["matmul_flop"].sum() > 0 and timed["time_ns"].sum() > 0


def test_forward_only_and_keyword_inputs(tmp_path, script):
    _, doc = launched(tmp_path / "infer", script, "infer")
    assert doc["backward"] is False and matmul(doc, "backward") == 0
    _, doc = launched(tmp_path / "kwarg", script, "kwarg")
    assert doc["input_shape"] == [2, 4] and matmul(doc, "forward") == 160


def test_a_model_the_counter_cannot_run_leaves_a_note_not_a_failure(tmp_path, script):
    out = tmp_path / "out"
    out.mkdir()
    (out / "flops.json").write_text("{}")  # a previous run's document is never kept
    record, doc = launched(out, script, "opaque")
    assert doc is None and record["flops"] is None and record["exit_status"] == 0
    assert len(record["notes"]) == 1 and record["notes"][0].startswith("FLOP counting failed")


def test_no_flops_option(tmp_path, script):
    record, doc = launched(tmp_path / "out", script, "train", "--no-flops")
    assert doc is None and record["flops"] is None


def test_attach_converts_the_document_and_load_reads_it_back(tmp_path, script):
    capture = tmp_path / "run" / "capture"
    launched(capture, script, "train")
    out = tmp_path / "run"
    analyse_file(capture / "trace.json", out)
    assert load_flops(out) is not None  # not attached: read from capture/flops.json
    analysis = analyse(load_profile(capture / "trace.json"))
    attached = attach_model_flops(analysis, capture)
    assert not (out / "flops.parquet").exists()  # attaching writes nothing
    write(attached, out)
    manifest = json.loads((out / "manifest.json").read_text())
    target = out / "flops.parquet"
    assert manifest == attached.manifest  # the manifest is written once, with every table
    assert manifest["tables"]["flops"]["file"] == target.name
    assert manifest["tables"]["flops"]["rows"] == pl.read_parquet(target).height > 0
    assert manifest["model_flops"]["compute_dtype"] == "float32"
    assert "rows" not in manifest["model_flops"]
    assert load_flops(out)["matmul_flop"].sum() == 160 + 192
    (capture / "flops.json").unlink()  # a later run whose counting failed
    write(attach_model_flops(analysis, capture), out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert "no flops.json" in manifest["model_flops"]["error"] and "flops" not in manifest["tables"]
    assert not target.exists() and load_flops(out) is None


def gpt2_small_forward_matmul(batch: int, seq: int, vocab: int = 50257) -> int:
    """12 blocks of qkv, attention (two matmuls), projection and MLP, plus the LM head."""
    tokens, d, heads = batch * seq, 768, 12
    per_block = 2 * tokens * d * (3 * d + d + 4 * d + 4 * d) + 2 * 2 * batch * heads * seq**2 * 64
    return 12 * per_block + 2 * tokens * d * vocab


@pytest.fixture(scope="module")
def gpt2_small_run(tmp_path_factory):
    """GPT-2 124M, batch 8 x 128, eager attention, one profiled training step on the CPU."""
    out = tmp_path_factory.mktemp("gpt2")
    capture = out / "capture"
    argv = ["--backend", "torch", "--out", str(capture), "--warmup-steps", "0", "--steps", "1"]
    args = ["--size", "small", "--batch", "8", "--seq-len", "128", "--steps", "1"]
    assert launch.main([*argv, str(EXAMPLE), *args, "--attn", "eager"]) == 0
    write(attach_model_flops(analyse(load_profile(capture / "trace.json")), capture), out)
    return out


@pytest.mark.slow
def test_gpt2_shapes_for_batch_8_and_sequence_128(gpt2_small_run):
    result = build_report(read_run(gpt2_small_run))
    shapes = result.tables["report_shapes"]

    def recorded(op: str, module: str) -> set[str]:
        hit = shapes.filter((pl.col("aten_op") == op) & (pl.col("module") == module))
        return set(hit.filter(pl.col("direction") == "forward")["input_shapes"])

    block = "transformer.h.0"
    assert "[[8, 128, 768], [], [768], [768], []]" in recorded(
        "aten::native_layer_norm", f"{block}.ln_1"
    )
    assert "[[8, 12, 128, 128], [], []]" in recorded("aten::_softmax", f"{block}.attn")
    assert "[[2304], [1024, 768], [768, 2304], [], []]" in recorded(
        "aten::addmm", f"{block}.attn.c_attn"
    )
    assert "[[3072], [1024, 768], [768, 3072], [], []]" in recorded(
        "aten::addmm", f"{block}.mlp.c_fc"
    )
    assert "## Input shapes" in result.markdown and "`aten::_softmax`" in result.markdown


@pytest.mark.slow
def test_gpt2_flops_from_shapes_and_from_the_model_agree(gpt2_small_run):
    expected = gpt2_small_forward_matmul(8, 128)
    assert expected == 257_825_439_744
    run = read_run(gpt2_small_run)
    phases = {}
    for source in ("shapes", "model"):
        result = build_report(run, options=ReportOptions(flops=source))
        assert result.findings.source == source
        table = result.tables["report_phases"]
        phases[source] = dict(zip(table["phase"], table["matmul_flop"], strict=True))
    # one step: forward once, backward twice the forward (eager attention: no recompute)
    assert phases["shapes"]["forward"] == phases["model"]["forward"] == expected
    assert phases["shapes"]["backward"] == phases["model"]["backward"] == 2 * expected
