"""FLOP counting: instrument.flops (fake tensors) and nsysmap.flops.module_flops (tables, CLI).

The GPT-2 124M reference numbers are derived here from 2·m·k·n with the
model's sizes, independently of the counter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import polars as pl
import pytest

from instrument.flops import EXIT_FAILED, EXIT_MISSING, EXIT_SPEC, count_flops
from instrument.flops import main as counter_main
from nsysmap.core.errors import ExitCode
from nsysmap.flops import module_flops as flops
from tests.cli_runner import nsysmap_cli

pytestmark = pytest.mark.slow  # FLOP counting imports torch and runs models on fake tensors

os.environ.setdefault("HF_HUB_OFFLINE", "1")
try:
    import torch
    import transformers  # noqa: F401

    from instrument.flops.models import SpecError, gpt2_factory
except ImportError:  # the nsysmap-side tests still run
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch and transformers are not installed")

ROOT = Path(__file__).resolve().parent.parent

# GPT-2 124M, batch 1, sequence 1024: s = 1024 positions, d = 768, 12 heads of 64.
S, D, HEADS, LAYERS = 1024, 768, 12, 12
QKV = 2 * S * D * (3 * D)
SCORES = 2 * HEADS * S * (D // HEADS) * S
VALUES = 2 * HEADS * S * S * (D // HEADS)
OUT_PROJ = 2 * S * D * D
FC = PROJ = 2 * S * D * (4 * D)
BLOCK = QKV + SCORES + VALUES + OUT_PROJ + FC + PROJ


def test_reference_numbers_are_the_published_ones():
    assert (QKV, SCORES, VALUES, OUT_PROJ, FC) == (
        3_623_878_656,
        1_610_612_736,
        1_610_612_736,
        1_207_959_552,
        4_831_838_208,
    )
    assert BLOCK == 17_716_740_096
    assert LAYERS * BLOCK == 212_600_881_152


@cache
def gpt2(attn="sdpa", vocab=None, logits="all", batch=1, seq=S, backward=True):
    doc = count_flops(
        gpt2_factory("small", vocab=vocab, attn=attn),
        batch,
        seq,
        logits=logits,
        backward=backward,
    )
    return flops.flops_table(doc), flops.module_table(doc), doc


def module_flop(table, module, direction="forward", **where):
    rows = table.filter(pl.col("module") == module, pl.col("direction") == direction)
    for column, value in where.items():
        rows = rows.filter(pl.col(column) == value)
    return rows["matmul_flop"].sum()


@needs_torch
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_gpt2_small_block_breakdown(attn):
    table, modules, _ = gpt2(attn)
    inclusive = flops.by_module(table, modules, inclusive=True)
    for layer in range(LAYERS):
        block = f"transformer.h.{layer}"
        assert module_flop(table, f"{block}.attn.c_attn") == QKV
        assert module_flop(table, f"{block}.attn.c_proj") == OUT_PROJ
        assert module_flop(table, f"{block}.mlp.c_fc") == FC
        assert module_flop(table, f"{block}.mlp.c_proj") == PROJ
        row = inclusive.filter(pl.col("module") == block)
        assert row["forward_matmul_flop"].item() == BLOCK
    blocks = flops.repeated_blocks(inclusive).filter(pl.col("parent") == "transformer.h")
    assert blocks["blocks"].item() == LAYERS
    assert blocks["forward_matmul_flop"].item() == 212_600_881_152


@needs_torch
def test_eager_attention_shows_scores_and_values_as_two_bmm():
    table, _, _ = gpt2("eager")
    attn = "transformer.h.5.attn"
    scores = "[[12, 1024, 64], [12, 64, 1024]]"
    values = "[[12, 1024, 1024], [12, 1024, 64]]"
    assert module_flop(table, attn, op="aten::bmm", input_shapes=scores) == SCORES
    assert module_flop(table, attn, op="aten::bmm", input_shapes=values) == VALUES
    assert module_flop(table, attn) == SCORES + VALUES


@needs_torch
def test_sdpa_is_split_into_its_two_matmuls():
    table, _, _ = gpt2("sdpa")
    attn = table.filter(pl.col("module") == "transformer.h.5.attn", pl.col("kind") == "attention")
    forward = attn.filter(pl.col("direction") == "forward")
    assert sorted(forward["part"]) == ["scores", "values"]
    assert forward.filter(pl.col("part") == "scores")["matmul_flop"].item() == SCORES
    assert forward.filter(pl.col("part") == "values")["matmul_flop"].item() == VALUES
    assert set(forward["calls"]) == {1}


@needs_torch
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize(
    ("vocab", "logits", "expected"),
    [
        (None, "all", 291_648_307_200),  # vocabulary 50,257
        (50_304, "last", 212_678_148_096),
        (50_304, "all", 291_722_231_808),
    ],
)
def test_gpt2_small_forward_totals(attn, vocab, logits, expected):
    table, _, _ = gpt2(attn, vocab, logits)
    positions = 1 if logits == "last" else S
    head = 2 * positions * D * (vocab or 50_257)
    assert module_flop(table, "lm_head") == head
    assert LAYERS * BLOCK + head == expected
    totals = flops.by_direction(table)
    assert totals.filter(pl.col("direction") == "forward")["matmul_flop"].item() == expected


@needs_torch
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_backward_is_reported_apart_and_is_twice_forward(attn):
    table, modules, _ = gpt2(attn)
    assert set(table["direction"].cast(pl.String)) == {"forward", "backward"}
    own = flops.by_module(table, modules)
    recompute = (
        table.filter(pl.col("part") == "recompute_scores")
        .group_by("module")
        .agg(recompute=pl.col("matmul_flop").sum())
    )
    own = own.join(recompute, on="module", how="left").fill_null(0)
    assert (own["backward_matmul_flop"] - own["recompute"] == 2 * own["forward_matmul_flop"]).all()
    assert own["forward_matmul_flop"].sum() > 0
    if attn == "eager":
        assert own["recompute"].sum() == 0
    else:  # flash attention recomputes Q·Kᵀ once per layer in its backward
        assert own["recompute"].sum() == LAYERS * SCORES


@needs_torch
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_flop_counter_mode_agrees(attn):
    table, modules, doc = gpt2(attn)
    totals = flops.by_direction(table)
    assert totals["matmul_flop"].to_list() == [
        doc["flop_counter"]["total"]["forward"],
        doc["flop_counter"]["total"]["backward"],
    ]
    mine = flops.by_module(table, modules, inclusive=True)
    theirs = flops.counter_table(doc).pivot(on="direction", index="module", values="matmul_flop")
    both = mine.join(theirs, on="module")
    assert len(both) > 100
    assert (both["forward_matmul_flop"] == both["forward"]).all()
    # Backward: FlopCounterMode follows modules with gradient hooks on their inputs
    # and outputs, which misplaces some backward work (docs/flops.md): a module
    # returning its input unchanged (Dropout, p=0) stays open for the rest of the
    # backward; eager GPT2Attention, which also returns its attention weights, opens
    # only once their gradient exists. Leaf matmul modules, blocks and the root agree.
    steady = both.filter(pl.col("module_class").is_in(["Conv1D", "Linear", "GPT2Block"]))
    assert len(steady) == 12 * 5 + 1
    assert (steady["backward_matmul_flop"] == steady["backward"]).all()
    root = both.filter(pl.col("module") == "")
    assert root["backward_matmul_flop"].item() == root["backward"].item()


@needs_torch
def test_shapes_per_module_batch_8_sequence_128():
    table, _, _ = gpt2("eager", batch=8, seq=128, backward=False)

    def shapes(module, op):
        rows = table.filter(pl.col("module") == module, pl.col("op") == op)
        return set(rows["input_shapes"])

    assert shapes("transformer.h.3.ln_1", "aten::native_layer_norm") == {
        "[[8, 128, 768], [], [768], [768], []]"
    }
    assert shapes("transformer.h.3.attn", "aten::_softmax") == {"[[8, 12, 128, 128], [], []]"}
    assert shapes("transformer.h.3.attn.c_attn", "aten::addmm") == {
        "[[2304], [1024, 768], [768, 2304]]"
    }
    assert shapes("transformer.h.3.mlp.c_fc", "aten::addmm") == {
        "[[3072], [1024, 768], [768, 3072]]"
    }


@needs_torch
def test_estimates_follow_the_documented_factors():
    table, _, _ = gpt2("eager", batch=8, seq=128, backward=False)

    def row(module, op):
        return table.filter(pl.col("module") == module, pl.col("op") == op).row(0, named=True)

    norm = row("transformer.h.3.ln_1", "aten::native_layer_norm")
    assert (norm["kind"], norm["matmul_flop"], norm["other_flop_estimate"]) == (
        "norm",
        0,
        7 * 8 * 128 * 768,
    )
    softmax = row("transformer.h.3.attn", "aten::_softmax")
    assert softmax["other_flop_estimate"] == 5 * 8 * 12 * 128 * 128
    addmm = row("transformer.h.3.attn.c_attn", "aten::addmm")  # the bias add
    assert addmm["other_flop_estimate"] == 1024 * 2304
    tanh = row("transformer.h.3.mlp.act", "aten::tanh")
    assert (tanh["kind"], tanh["other_flop_estimate"]) == ("pointwise", 8 * 128 * 3072)
    views = table.filter(pl.col("op") == "aten::view")
    assert set(views["kind"]) == {"movement"} and views["other_flop_estimate"].sum() == 0


@needs_torch
def test_sdpa_parts_sum_to_torch_formulas():
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    from instrument.flops.ops import sdpa_backward_parts, sdpa_forward_parts

    q, kv = torch.empty(2, 8, 96, 64, device="meta"), torch.empty(2, 2, 80, 64, device="meta")
    shapes = (q.shape, kv.shape, kv.shape)
    assert sum(f for _, f in sdpa_forward_parts(q, kv, kv)) == sdpa_flop_count(*shapes)
    backward = sum(f for _, f in sdpa_backward_parts(q, kv, kv))
    assert backward == sdpa_backward_flop_count(q.shape, *shapes)


@needs_torch
def test_exclusive_rows_sum_to_the_inclusive_root():
    table, modules, _ = gpt2("sdpa")
    own = flops.by_module(table, modules)
    root = flops.by_module(table, modules, inclusive=True).filter(pl.col("module") == "")
    for column in ("forward_matmul_flop", "backward_other_flop_estimate"):
        assert own[column].sum() == root[column].item()


@needs_torch
def test_model_is_never_materialised():
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    from instrument.flops.fake_run import materialise

    with FakeTensorMode(allow_non_fake_inputs=True):
        model = materialise(gpt2_factory("small"))
    assert all(isinstance(p, FakeTensor) for p in model.parameters())
    with torch.device("meta"):
        meta_model = torch.nn.Linear(4, 4)
    doc = count_flops(meta_model, input_shape=(3, 4), input_dtype="float32")
    assert meta_model.weight.device.type == "meta" and meta_model.weight.grad is None
    linear = flops.flops_table(doc).filter(pl.col("direction") == "forward", pl.col("module") == "")
    assert linear["matmul_flop"].sum() == 2 * 3 * 4 * 4
    with pytest.raises(SpecError, match="meta device"):
        count_flops(torch.nn.Linear(4, 4), input_shape=(3, 4), input_dtype="float32")


def tiny_mlp():
    """A factory for the CLI tests: 16 -> 32 -> 8 on float input."""
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))


def not_a_module():
    return 42


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    """Factories are named as tests.test_flops:..., importable from the repository root."""
    monkeypatch.chdir(ROOT)


def run_cli(capsys, *args):
    code = nsysmap_cli(["flops", *args])
    out, err = capsys.readouterr()
    return code, out, err


@needs_torch
def test_cli_json_round_trip_gpt2_small(capsys):
    code, out, err = run_cli(capsys, "--gpt2", "small", "--json")
    assert code == 0, err
    doc = json.loads(out)
    totals = flops.by_direction(flops.flops_table(doc))
    assert totals["matmul_flop"].to_list() == [
        291_648_307_200,
        2 * 291_648_307_200 + LAYERS * SCORES,
    ]
    # Real fp32 weights alone would add 498 MB to the counting process.
    rss = doc["peak_rss_bytes"]
    assert rss["after"] - rss["before"] < 400 * 2**20


@needs_torch
def test_cli_renders_table_and_totals(capsys, monkeypatch):
    def count_here(options, python=None):  # the counter, without its subprocess
        assert options[:2] == ["--gpt2", "tiny"] and "--seq" in options
        return count_flops(gpt2_factory("tiny"), 1, 64)

    monkeypatch.setattr(flops, "count", count_here)
    code, out, _ = run_cli(capsys, "--gpt2", "tiny", "--seq", "64", "--depth", "1")
    assert code == 0
    assert "transformer.h: 2 x GPT2Block" in out and "lm_head (Linear)" in out
    head = 2 * 64 * 128 * 50_257
    assert f"{head:,}" in out and f"{2 * head:,}" in out


def run_counter(capsys, *args):
    """`python -m instrument.flops ARGS`, in this process."""
    status = counter_main([*args, "--json"])
    out, err = capsys.readouterr()
    return status, out, err


@needs_torch
def test_counter_factory_with_float_input(capsys):
    args = ["--factory", "tests.test_flops:tiny_mlp", "--input-shape", "4,16"]
    status, out, err = run_counter(capsys, *args, "--input-dtype", "float32")
    assert status == 0, err
    table = flops.flops_table(json.loads(out))
    forward = table.filter(pl.col("direction") == "forward")
    assert module_flop(forward, "0") == 2 * 4 * 16 * 32
    assert module_flop(forward, "2") == 2 * 4 * 32 * 8
    assert module_flop(table, "2", "backward") == 2 * 2 * 4 * 32 * 8


@needs_torch
@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["--factory", "tests.test_flops:not_a_module"], EXIT_SPEC, "not an nn.Module"),
        (
            ["--factory", "tests.test_flops:tiny_mlp", "--logits", "last"],
            EXIT_SPEC,
            "logits_to_keep",
        ),
        (["--factory", "tests.test_flops"], EXIT_SPEC, "module:callable"),
        (["--gpt2", "small", "--seq", "4096"], EXIT_SPEC, "context 1024"),
        (["--gpt2", "huge"], EXIT_SPEC, "unknown GPT-2 size"),
        (["--factory", "tests.test_flops:tiny_mlp"], EXIT_FAILED, "counting failed"),
    ],
)
def test_counter_errors_are_one_line(capsys, args, status, message):
    code, out, err = run_counter(capsys, *args)
    assert code == status
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("instrument.flops: error: ") and message in err


@pytest.mark.parametrize(
    ("status", "error", "code"),
    [
        (EXIT_SPEC, flops.FlopsSpecError, ExitCode.USAGE),
        (EXIT_MISSING, flops.FlopsToolMissing, ExitCode.TOOL_MISSING),
        (EXIT_FAILED, flops.FlopsCountFailed, ExitCode.SCRIPT_FAILED),
    ],
)
def test_counter_status_maps_to_nsysmap_errors(status, error, code):
    stderr = "some warning\ninstrument.flops: error: what went wrong\n"
    raised = flops._counter_error(status, stderr, "python")
    assert type(raised) is error and raised.exit_code == code
    assert str(raised) == "what went wrong"


@needs_torch
def test_cli_bad_factory_is_one_line(capsys):
    status, out, err = run_cli(capsys, "--factory", "no_such_module_for_nsysmap:build")
    assert status == ExitCode.USAGE
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(
        "nsysmap: error: cannot import factory module 'no_such_module_for_nsysmap'"
    )


def test_cli_without_torch_is_one_line(capsys, tmp_path):
    python = tmp_path / "python-without-site"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    status, _, err = run_cli(capsys, "--gpt2", "tiny", "--python", str(python))
    assert status == ExitCode.TOOL_MISSING
    assert err.count("\n") == 1 and "is not installed" in err


def _document(rows, modules):
    return {"format": "nsysmap-flops", "version": 1, "rows": rows, "modules": modules}


def _row(module, direction, matmul, other=0, part=""):
    return {
        "module": module,
        "module_class": None if module is None else "M",
        "direction": direction,
        "op": "aten::mm",
        "part": part,
        "kind": "matmul",
        "input_shapes": "[]",
        "calls": 1,
        "matmul_flop": matmul,
        "other_flop_estimate": other,
    }


def test_tables_of_a_hand_made_document():
    paths = ["", "a", "a.b", "c", "h", "h.0", "h.1"]
    doc = _document(
        [
            _row("a.b", "forward", 10, other=1),
            _row("a", "forward", 5),
            _row("", "backward", 3),
            _row(None, "forward", 7, other=2),
            _row("h.0", "forward", 2),
            _row("h.1", "forward", 2),
            _row("a.b", "backward", 4, part="recompute_scores"),
        ],
        [{"module": p, "module_class": "M"} for p in paths],
    )
    table, modules = flops.flops_table(doc), flops.module_table(doc)
    assert modules["depth"].to_list() == [0, 1, 2, 1, 1, 2, 2]
    own = flops.by_module(table, modules)
    assert own["module"].to_list() == paths
    assert own["forward_matmul_flop"].to_list() == [0, 5, 10, 0, 0, 2, 2]
    assert own["backward_matmul_flop"].to_list() == [3, 0, 4, 0, 0, 0, 0]
    inclusive = flops.by_module(table, modules, inclusive=True)
    assert inclusive["forward_matmul_flop"].to_list() == [19, 15, 10, 0, 4, 2, 2]
    assert inclusive["backward_matmul_flop"].to_list() == [7, 4, 4, 0, 0, 0, 0]
    assert inclusive["forward_other_flop_estimate"].to_list() == [1, 1, 1, 0, 0, 0, 0]
    totals = flops.by_direction(table)
    assert totals.rows() == [("forward", 26, 0, 3), ("backward", 7, 4, 0)]
    blocks = flops.repeated_blocks(inclusive)
    assert blocks.select("parent", "blocks", "forward_matmul_flop").rows() == [("h", 2, 4)]


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"format": "something else", "version": 1},
        {"format": "nsysmap-flops", "version": 2, "rows": []},
        {"format": "nsysmap-flops", "version": 1, "rows": [{"module": "", "calls": "many"}]},
    ],
)
def test_documents_of_another_kind_are_refused(doc):
    with pytest.raises(flops.FlopsFormatError):
        flops.flops_table(doc)


def test_nsysmap_side_never_imports_torch():
    code = "import sys, nsysmap.flops.module_flops, nsysmap.cli.flops; "
    code += "print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.strip() == "False", done.stderr
