"""Blocks, layers and inclusive module time on real torch.profiler traces with module frames.

Expected values come from the trace's own `nn.Module: <Class>_<N>` event
names, read here with the standard library, and from the ops table by plain
string prefixes, never from nsysmap.attribution.module_names. The tests skip,
with the reason shown, when the corpus is absent.
"""

from __future__ import annotations

import gzip
import json
import re
from functools import cache
from pathlib import Path

import polars as pl
import pytest

from nsysmap.flow.verbs import analyse_file
from nsysmap.output.writer import read_outputs
from nsysmap.report.blocks import block_totals
from nsysmap.report.build import ReportResult, build_report
from nsysmap.report.report_files import read_run
from tests.corpus import corpus_path

pytestmark = pytest.mark.corpus  # the real traces of ../shared/corpus

GPT2_TRAIN = "aiperf_hf_gpt2_train_step_with_modules_stack_b200.json"
SWITCH = "switchtransformer_moe_fwd_with_modules_a100.json"
BERT = "tracelens_bert_small_infer_modules_h100.json.gz"
# The class of each trace's repeated layers (the catalogue describes the models).
BLOCK_CLASS = {GPT2_TRAIN: "GPT2Block", SWITCH: "SwitchTransformerBlock", BERT: "BertLayer"}
MODULE = "nn.Module: "


def _module_names(name: str) -> set[str]:
    """The distinct module frame names of the trace (`GPT2Block_0`, ...)."""
    path = corpus_path(name)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    return {e["name"][len(MODULE) :] for e in events if e.get("name", "").startswith(MODULE)}


@cache
def _report(name: str, out: Path) -> tuple[ReportResult, dict[str, pl.DataFrame]]:
    analyse_file(corpus_path(name), out, options={"command": "attribute"})
    return build_report(read_run(out)), read_outputs(out)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    def get(name: str) -> tuple[ReportResult, dict[str, pl.DataFrame]]:
        return _report(name, tmp_path_factory.mktemp("out") / "o")

    return get


@pytest.mark.parametrize("name", [GPT2_TRAIN, SWITCH, BERT])
def test_blocks_of_torch_profiler_models_are_their_repeated_layers(report, name):
    block_class = BLOCK_CLASS[name]
    numbers = {
        int(m.group(1))
        for n in _module_names(name)
        if (m := re.fullmatch(rf"{block_class}_(\d+)", n))
    }
    assert len(numbers) >= 2
    result, tables = report(name)
    totals = block_totals(result.findings.module_phase)
    assert totals["block_index"].to_list() == sorted(numbers)
    assert set(totals["block_class"]) == {block_class}
    assert [b.rsplit(".", 1)[1] for b in totals["block"]] == [
        f"{block_class}_{n}" for n in sorted(numbers)
    ]
    # every operation inside a block instance, by name, is in its block's row
    ops = tables["ops"]
    inside = pl.col("module").str.contains(rf"(^|\.){block_class}_\d+(\.|$)")
    assert totals["time_ns"].sum() == ops.filter(inside)["dur_ns"].sum() > 0
    parts = result.tables["report_blocks"]
    assert parts["time_ns"].sum() == totals["time_ns"].sum()
    # the parts of every block line up: one set of part names for all blocks
    per_block = parts.group_by("block").agg(pl.col("part").sort())
    assert per_block["part"].n_unique() == 1


@pytest.mark.parametrize("name", [GPT2_TRAIN, SWITCH, BERT])
def test_layers_have_no_instance_numbers_and_pool_the_blocks(report, name):
    result, tables = report(name)
    layers = result.tables["report_layers"]
    assert not layers["layer"].str.contains(r"_\d+(\.|$)").any()
    # the layers in blocks hold the time of every block instance
    block = f"{BLOCK_CLASS[name]}_"
    in_blocks = layers.filter(pl.col("layer").str.contains(f".{block}*", literal=True))
    inside = pl.col("module").str.contains(rf"(^|\.){block}\d+(\.|$)")
    assert in_blocks["time_ns"].sum() == tables["ops"].filter(inside)["dur_ns"].sum() > 0
    # every module of the model, as named in the ops, is in exactly one layer
    assert layers["modules"].sum() == tables["ops"]["module"].drop_nulls().n_unique()
    assert layers["time_ns"].sum() == tables["ops"].drop_nulls("module")["dur_ns"].sum()


@pytest.mark.parametrize("name", [GPT2_TRAIN, BERT])
def test_every_module_above_an_operation_has_a_row_with_inclusive_time(report, name):
    _, tables = report(name)
    ops, by_module = tables["ops"], tables["by_module"]
    own = set(ops["module"].drop_nulls())
    above = {".".join(p.split(".")[:i]) for p in own for i in range(1, p.count(".") + 2)}
    rows = {r["module"]: r for r in by_module.iter_rows(named=True) if r["module"] is not None}
    assert set(rows) == above
    assert above - own  # some module launches nothing itself (GPT2MLP_0, BertLayer_0)
    for path in above:
        under = ops.filter(
            (pl.col("module") == path) | pl.col("module").str.starts_with(path + ".")
        )
        forward = under.filter(pl.col("direction") == "forward")["dur_ns"].sum()
        row = rows[path]
        assert (row["inclusive_ops"], row["inclusive_ns"]) == (under.height, under["dur_ns"].sum())
        assert row["inclusive_forward_ns"] == forward
        if path not in own:
            assert (row["ops"], row["time_ns"], row["module_class"]) == (
                0,
                0,
                re.sub(r"_\d+$", "", path.rsplit(".", 1)[-1]),
            )
    # exclusive time still adds up to the device's total
    assert by_module["time_ns"].sum() == ops["dur_ns"].sum()
    assert by_module["ops"].sum() == ops.height
    names = {p.rsplit(".", 1)[-1] for p in above}
    assert names <= _module_names(name)


def test_forward_is_call_direction_in_both_tables_on_an_inference_trace(report):
    # No phase ranges: every operation has phase null, and direction forward.
    result, tables = report(BERT)
    ops = tables["ops"]
    assert ops["phase"].is_null().all()
    layers, by_module = result.tables["report_layers"], tables["by_module"]
    forward = ops.filter(pl.col("direction") == "forward").drop_nulls("module")["dur_ns"].sum()
    assert forward > 0
    assert layers["forward_ns"].sum() == by_module["forward_ns"].sum() == forward
    assert (layers["forward_ns"] == layers["time_ns"]).all()
