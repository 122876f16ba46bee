"""Inferred steps, phases and blocks (nsysmap.infer), checked where the truth is known.

The synthetic GPT-2 exports and the real course-assignment exports carry
ranges; their measured step, phase and module are hidden from inference
(nulled before it runs) and then compared with what it inferred.
"""

from __future__ import annotations

import random
import sqlite3
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from devtools.synth.bulk import write_export
from devtools.synth.tile import gpt_tables
from nsysmap.cli import cli
from nsysmap.flow.verbs import analyse, load_profile, write
from nsysmap.infer import label as label_module
from nsysmap.infer.motif import motif_regions, narrowed
from nsysmap.infer.period import step_period
from nsysmap.infer.repeats import passes
from nsysmap.infer.summary import LAYER_INDEX, agreement, infer_ops
from nsysmap.report.answers import ReportOptions
from nsysmap.report.build import build_report
from nsysmap.report.report_files import read_run
from tests.corpus import REAL

SAMPLES = Path(__file__).parents[1] / "sample_reports"
MEASURED = ("step", "phase", "module", "range_id", "range_name", "range_path")
TRUE_PHASE = {"data": "data", "zero_grad": "data", "forward": "forward", "loss": "forward"}
TRUE_PHASE |= {"backward": "backward", "optimizer": "optimizer"}


def _hidden(ops: pl.DataFrame) -> pl.DataFrame:
    """The ops with every measured label removed."""
    return ops.with_columns(pl.lit(None, ops.schema[c]).alias(c) for c in MEASURED)


def _share(ops: pl.DataFrame, ok: pl.Expr, where: pl.Expr) -> float:
    part = ops.filter(where)
    return part.filter(ok)["dur_ns"].sum() / part["dur_ns"].sum()


@pytest.fixture(scope="module", params=[(4, 1500), (12, 3000)], ids=["4 layers", "12 layers"])
def gpt(request, tmp_path_factory) -> tuple[pl.DataFrame, int]:
    n_layer, n_kernels = request.param
    path = tmp_path_factory.mktemp("gpt") / "g.sqlite"
    write_export(path, gpt_tables(n_kernels, seed=3, n_layer=n_layer, processes=1))
    ops = analyse(load_profile(path), infer=False).ops
    labels = infer_ops(_hidden(ops)).labels
    return ops.join(labels, on=["op_id", "device_id"]), n_layer


@pytest.mark.slow
def test_synthetic_blocks_phases_and_steps_match_the_truth(gpt):
    ops, n_layer = gpt
    layer = pl.col("module").str.extract(r"\.h\.(\d+)(?:\.|$)").cast(pl.Int64)
    in_layer = layer.is_not_null()
    assert _share(ops, layer == pl.col("inferred_block"), in_layer) >= 0.95
    assert ops["inferred_block"].max() == n_layer - 1
    true_phase = pl.col("phase").replace_strict(TRUE_PHASE, default=None)
    assert _share(ops, true_phase == pl.col("inferred_phase"), true_phase.is_not_null()) >= 0.95
    # Steps: one inferred step per measured step (numbering may be offset).
    pairs = ops.filter(pl.col("step").is_not_null()).group_by("step", "inferred_step").len()
    assert pairs["step"].n_unique() == pairs.height == pairs["inferred_step"].n_unique()


@pytest.mark.slow
def test_measured_labels_are_not_read():
    """Inference gives the same answer whether or not the ops carry measured labels."""
    path = SAMPLES
    ops = analyse(load_profile(path / "gpt2_tiny_train.sqlite"), infer=False).ops
    assert infer_ops(ops).labels.equals(infer_ops(_hidden(ops)).labels)


@pytest.mark.slow
def test_ops_without_a_device_id_get_the_same_blocks():
    """An export whose device id column is unreadable (null) is inferred like the others."""
    ops = analyse(load_profile(SAMPLES / "gpt2_tiny_train.sqlite"), infer=False).ops
    known = infer_ops(ops)
    unknown = infer_ops(ops.with_columns(pl.lit(None, pl.Int64).alias("device_id")))
    assert unknown.found[0].device_id is None
    assert unknown.labels.drop("device_id").equals(known.labels.drop("device_id"))
    placed = unknown.by_inferred_block.filter(pl.col("inferred_block").is_not_null())
    assert (
        placed["time_ns"].sum()
        == known.by_inferred_block.filter(pl.col("inferred_block").is_not_null())["time_ns"].sum()
        > 0
    )
    assert unknown.lines(cpu=False)[0].startswith("device unknown (inferred")


def _planted(rnd: random.Random, steps: int, motif: int, repeats: int, noise: float):
    """Codes and launch gaps of `steps` steps, each a prologue, `repeats` blocks of
    a `motif`-kernel motif and an epilogue, with noise kernels inserted at `noise`."""
    block = [rnd.randrange(10, 40) for _ in range(motif)]
    step = [1, 2, 3] + block * repeats + [4, 5, 6, 7]
    codes, gaps, noise_code = [], [], 1000
    for _ in range(steps):
        for i, code in enumerate(step):
            if i > 0 and rnd.random() < noise:
                codes.append(noise_code)
                gaps.append(1_000)
                noise_code += 1
            codes.append(code)
            gaps.append(5_000_000 if i == 0 else 1_000)
    return np.array(codes), np.array(gaps), len(step)


@pytest.mark.parametrize("seed", range(12))
def test_planted_period_and_motif_are_found_through_noise(seed):
    rnd = random.Random(seed)
    steps, motif, repeats = rnd.randint(3, 8), rnd.randint(5, 30), rnd.randint(4, 24)
    codes, gaps, length = _planted(rnd, steps, motif, repeats, noise=0.01)
    found = step_period(codes, gaps)
    assert found is not None
    inserted = codes.size - steps * length
    assert length <= found[0] <= length + inserted
    assert passes(codes, gaps)[0].max() + 1 == steps
    clean, _, _ = _planted(random.Random(seed), 1, motif, repeats, noise=0.0)
    (region,) = motif_regions(clean)
    assert (region.length, region.repeats) == (motif, repeats)


@pytest.mark.parametrize(
    ("offset", "dtype"),
    [(0, np.int16), (40_000, np.int32), (-(2**20), np.int32), (2**40, np.int64)],
)
def test_the_period_is_found_the_same_in_the_narrowest_type(offset, dtype):
    """The search reads the codes in the smallest type that holds them: the same period,
    score and gap wherever the codes lie, the anchor the same code."""
    codes, gaps, length = _planted(random.Random(3), 6, 12, 8, noise=0.01)
    shifted = codes.astype(np.int64) + offset
    assert narrowed(shifted).dtype == dtype
    assert narrowed(shifted).tolist() == shifted.tolist()
    plain, moved = step_period(codes.astype(np.int64), gaps), step_period(shifted, gaps)
    assert plain is not None and moved is not None
    assert moved == (plain[0], plain[1] + offset, plain[2], plain[3])
    assert plain[0] >= length


def test_no_period_without_repeats():
    rnd = np.random.default_rng(0)
    codes = rnd.integers(0, 10_000, 500)
    assert step_period(codes, np.full(500, 1_000)) is None
    assert motif_regions(np.arange(500)) == []


needs_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"the real corpus is not at {REAL}")


def _attention_layer(ops: pl.DataFrame) -> pl.DataFrame:
    """Ops in launch order with the ordinal of their user attention range (the true layer)."""
    in_attn = pl.col("range_path").str.contains("forward pass > scaled dot product attention")
    order = pl.coalesce("launch_start_ns", "start_ns")
    return ops.sort(order).with_columns(
        layer=pl.when(in_attn).then((in_attn & ~in_attn.shift(1, fill_value=False)).cum_sum() - 1)
    )


@pytest.mark.corpus
@needs_real
@pytest.mark.parametrize(
    ("name", "phases"),
    [
        ("cs336a2_small_fwd_emitnvtx_shapes_a100.sqlite", 0.99),
        ("cs336a2_small_fwdbwd_emitnvtx_shapes_a100.sqlite", 0.99),
    ],
)
def test_real_exports_agree_with_their_ranges(name, phases):
    """With the ranges hidden: 12 blocks, one pass, and backward only where there is one."""
    ops = analyse(load_profile(REAL / name), infer=False).ops
    ops = _attention_layer(ops.join(infer_ops(_hidden(ops)).labels, on=["op_id", "device_id"]))
    assert (
        _share(ops, pl.col("layer") == pl.col("inferred_block"), pl.col("layer").is_not_null())
        >= 0.9
    )
    true_phase = pl.col("phase").replace_strict(TRUE_PHASE, default=None)
    assert _share(ops, true_phase == pl.col("inferred_phase"), true_phase.is_not_null()) >= phases
    assert (
        ops.filter(pl.col("inferred_phase") == "forward")["inferred_block"].drop_nulls().n_unique()
        == 12
    )
    assert ops["inferred_step"].n_unique() == 1
    has_backward = (ops["phase"] == "backward").any()
    assert (ops["inferred_phase"] == "backward").any() == has_backward


@pytest.mark.corpus
@needs_real
@pytest.mark.parametrize(
    ("name", "layers", "agree"),
    [
        ("tracelens_bert_small_infer_modules_h100.json.gz", 4, 0.9),
        ("tracelens_vit_nsfw_infer_modules_h100.json.gz", 12, 0.9),
        ("tracelens_timesformer_infer_modules_h100.json.gz", 12, 0.9),
    ],
)
def test_module_traces_agree_with_their_layer_modules(name, layers, agree):
    """torch.profiler traces whose module tree names each layer (BertLayer_3): with the
    modules hidden, as many blocks as layers, forward only, and >= 90 % of the time agrees."""
    ops = analyse(load_profile(REAL / name), infer=False).ops
    inferred = infer_ops(_hidden(ops))
    ops = ops.join(inferred.labels, on=["op_id", "device_id"])
    layer = pl.col("module").str.extract(LAYER_INDEX).cast(pl.Int64)
    assert ops["inferred_block"].drop_nulls().n_unique() == layers
    assert _share(ops, layer == pl.col("inferred_block"), layer.is_not_null()) >= agree
    assert not inferred.found[0].backward and inferred.found[0].steps == 1
    assert _share(ops, pl.col("inferred_region").is_not_null(), pl.lit(True)) >= 0.8


@pytest.mark.corpus
@needs_real
def test_export_without_ranges_gets_blocks():
    report = load_profile(REAL / "cs336a2_fwd_no_nvtx_a100.sqlite")
    inferred = analyse(report).inferred
    table = inferred.by_inferred_block
    blocks = table.filter(pl.col("inferred_block").is_not_null())
    assert blocks["inferred_block"].n_unique() == 12  # the model's 12 layers
    assert table["time_share"].sum() == pytest.approx(1.0)
    # A warm-up pass and three timed ones, forward only; placed: blocks, prefix, suffix.
    assert inferred.found[0].steps == 4
    assert "backward" not in set(table["inferred_phase"])
    assert table.filter(pl.col("inferred_region").is_not_null())["time_share"].sum() >= 0.8
    assert "4 passes, forward only; 12 repeating blocks" in inferred.lines(cpu=False)[0]


@pytest.mark.slow
def test_cli_writes_inferred_tables_unless_told_not_to(tmp_path):
    sample = SAMPLES
    report = str(sample / "gpt2_tiny_train.sqlite")
    runner = CliRunner()
    on = runner.invoke(cli, ["attribute", report, "-o", str(tmp_path / "on")])
    assert on.exit_code == 0, on.output
    # The sample's own modules name its blocks: the tables are written, no summary line.
    assert "(inferred)" not in on.output
    table = pl.read_parquet(tmp_path / "on" / "by_inferred_block.parquet")
    assert (
        table["time_ns"].sum() == pl.read_parquet(tmp_path / "on" / "ops.parquet")["dur_ns"].sum()
    )
    off = runner.invoke(cli, ["attribute", report, "-o", str(tmp_path / "off"), "--no-infer"])
    assert off.exit_code == 0, off.output
    assert not (tmp_path / "off" / "inferred.parquet").exists()
    assert "(inferred)" not in off.output


@pytest.mark.slow
def test_the_summary_names_inferred_blocks_when_the_profile_has_no_ranges(tmp_path):
    path = write_export(tmp_path / "g.sqlite", gpt_tables(1000, seed=2, n_layer=3, processes=1))
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM NVTX_EVENTS")
    result = CliRunner().invoke(cli, ["attribute", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "(inferred" in result.output
    assert "3 forward blocks" in result.output


@pytest.mark.slow
def test_report_shows_inferred_blocks_when_no_module_names_them(tmp_path):
    """`nsysmap report` on a profile whose ranges are all gone: blocks 0, 1, 2 inferred."""
    path = write_export(tmp_path / "g.sqlite", gpt_tables(1000, seed=2, n_layer=3, processes=1))
    report = load_profile(path)
    write(analyse(replace(report, ranges=report.ranges.clear())), tmp_path / "out")
    text = build_report(read_run(tmp_path / "out"), options=ReportOptions()).markdown
    section = text.split("## Per block, inferred from the repeating kernel sequence")[1]
    rows = [line for line in section.splitlines() if line.startswith("| forward | ")]
    blocks = [row.split(" | ")[1:3] for row in rows if row.split(" | ")[1] == "block"]
    assert blocks[:3] == [["block", "0"], ["block", "1"], ["block", "2"]]


def test_block_agreement_allows_a_window_that_opens_inside_the_model():
    """A window of a run that opens inside block 3 numbers that block 0: the agreement
    compares layer and inferred block less the device's usual offset, and still counts
    a block out of line as a disagreement."""
    modules = [f"blocks.{i}.attn" for i in (3, 4, 5, 6)]
    joined = pl.DataFrame(
        {
            "device_id": [0] * 4,
            "dur_ns": [10, 10, 10, 5],
            "step": [None] * 4,
            "phase": [None] * 4,
            "module": modules,
            "inferred_step": [0] * 4,
            "inferred_phase": ["forward"] * 4,
            "inferred_block": [0, 1, 2, 2],  # the last is out of line
        },
        schema_overrides={"step": pl.Int64, "phase": pl.String},
    )
    block = agreement(joined).filter(pl.col("what") == "block").row(0, named=True)
    assert (block["measured_ns"], block["agreeing_ns"]) == (35, 30)


@pytest.mark.parametrize("high", [50, 10**12])
def test_confidence_bins_group_ops_as_the_distinct_keys_do(high):
    """Per pass and block, the ops' bins are the distinct keys: counted directly when
    the keys are few, ranked when they spread far (the same sums either way)."""
    rng = np.random.default_rng(high % 7)
    key = np.where(rng.random(400) < 0.3, -1, rng.integers(0, high, 400))
    bins = label_module._dense(key)
    ranks = np.unique(key, return_inverse=True)[1]
    pairs = set(zip(bins.tolist(), ranks.tolist(), strict=True))
    assert len(pairs) == len(set(bins.tolist())) == len(set(ranks.tolist()))
    weights = rng.random(400)
    by_bin = np.bincount(bins, weights=weights)[bins]
    assert np.array_equal(by_bin, np.bincount(ranks, weights=weights)[ranks])
