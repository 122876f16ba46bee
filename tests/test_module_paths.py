"""Module path names: layers (numbers collapsed), blocks and ancestors, on made-up paths.

The rules are nsysmap.attribution.module_names'; the real traces are in
tests/test_module_paths_corpus.py.
"""

from __future__ import annotations

import polars as pl
import pytest

from nsysmap.attribution.module_names import blocks_of, layer_path, with_ancestors
from nsysmap.report import scope_tables
from nsysmap.report.blocks import blocks
from nsysmap.report.flops_time import layers, shapes_module_phase


@pytest.mark.parametrize(
    ("path", "layer"),
    [
        ("transformer.h.3.attn", "transformer.h.*.attn"),
        ("h.11", "h.*"),
        ("model.layers.7.mlp.down_proj", "model.layers.*.mlp.down_proj"),
        ("encoder.layer.0.attention.self", "encoder.layer.*.attention.self"),
        ("blocks.2.norm1", "blocks.*.norm1"),
        ("GPT2Model_0.GPT2Block_3.GPT2Attention_3", "GPT2Model_*.GPT2Block_*.GPT2Attention_*"),
        ("Qwen2DecoderLayer_7.Qwen2MLP_7", "Qwen2DecoderLayer_*.Qwen2MLP_*"),
        ("Switch_0.SwitchTransformerBlock_3", "Switch_*.SwitchTransformerBlock_*"),
        ("TransformerBlock_12.MLPBlock_12", "TransformerBlock_*.MLPBlock_*"),
        ("Qwen2_5_VL_0.Qwen2_5_VLDecoderLayer_3", "Qwen2_5_VL_*.Qwen2_5_VLDecoderLayer_*"),
        # attribute names with a number are names, not instances: kept
        ("features.conv_1", "features.conv_1"),
        ("down.layer_2.0", "down.layer_2.*"),
        ("", ""),
    ],
)  # fmt: skip
def test_layer_path_collapses_numbers_and_instance_names(path, layer):
    frame = pl.DataFrame({"module": [path]})
    assert frame.select(layer_path())["module"].item() == layer
    # the report's name for it is the same rule
    assert frame.select(scope_tables.layer_path())["module"].item() == layer


def _blocks(paths: list[str]) -> dict[str, str | None]:
    table = blocks_of(pl.Series(paths))
    return dict(zip(table["module"], table["block"], strict=True))


def test_blocks_are_outermost_numbered_or_repeated_instances():
    gpt2 = "M_0.GPT2Model_0"
    paths = [
        f"{gpt2}.Embedding_0",  # wte and wpe: repeated, but leaves
        f"{gpt2}.Embedding_1",
        f"{gpt2}.GPT2Block_0.GPT2Attention_0.Conv1D_0",
        f"{gpt2}.GPT2Block_1.GPT2MLP_1.Conv1D_6",  # the block itself launches nothing
        f"{gpt2}.GPT2Block_1.SwitchMoE_1.FeedForward_3.Linear_9",  # repeated experts, inner
        f"{gpt2}.GPT2Block_1.SwitchMoE_1.FeedForward_4.Linear_10",
        f"{gpt2}.LayerNorm_4",
        "transformer.h.10.attn",
        "transformer.h.3.attn.0.c_attn",  # the outermost number
        "transformer.wte",
        "",
    ]
    got = _blocks(paths)
    assert got == {
        f"{gpt2}.Embedding_0": None,
        f"{gpt2}.Embedding_1": None,
        f"{gpt2}.GPT2Block_0.GPT2Attention_0.Conv1D_0": f"{gpt2}.GPT2Block_0",
        f"{gpt2}.GPT2Block_1.GPT2MLP_1.Conv1D_6": f"{gpt2}.GPT2Block_1",
        f"{gpt2}.GPT2Block_1.SwitchMoE_1.FeedForward_3.Linear_9": f"{gpt2}.GPT2Block_1",
        f"{gpt2}.GPT2Block_1.SwitchMoE_1.FeedForward_4.Linear_10": f"{gpt2}.GPT2Block_1",
        f"{gpt2}.LayerNorm_4": None,
        "transformer.h.10.attn": "transformer.h.10",
        "transformer.h.3.attn.0.c_attn": "transformer.h.3",
        "transformer.wte": None,
        "": None,
    }


def test_a_single_instance_is_no_block():
    got = _blocks(["Net_0.Block_0.Linear_0", "Net_0.Linear_1"])
    assert set(got.values()) == {None}


def test_ancestors_of_attribute_paths_reach_the_root_module():
    frame = pl.DataFrame(
        {"module": ["transformer.h.3", "Net_0.Block_1", "", None], "n": [1, 2, 3, 4]}
    )
    up = with_ancestors(frame).group_by("module").agg(pl.col("ancestor").sort())
    got = dict(zip(up["module"], up["ancestor"].to_list(), strict=True))
    assert got == {
        "transformer.h.3": ["", "transformer", "transformer.h", "transformer.h.3"],
        "Net_0.Block_1": ["Net_0", "Net_0.Block_1"],  # a torch.profiler root has a name
        "": [""],
    }


def _ops(rows: list[tuple[str, str, str | None, str | None, int]]) -> pl.DataFrame:
    """OPS-like rows: module, class, phase, direction, dur_ns (one device, no FLOPs)."""
    frame = pl.DataFrame(
        rows, schema=["module", "module_class", "phase", "direction", "dur_ns"], orient="row"
    )
    return frame.with_columns(
        device_id=pl.lit(0, pl.Int64),
        **{c: pl.lit(None, pl.Int64) for c in ("matmul_flop", "recompute_flop")},
        other_flop_estimate=pl.lit(None, pl.Int64),
        aten_op=pl.lit("aten::mm"),
    )


def test_forward_and_backward_mean_call_direction_not_phase():
    # Block 0's forward is recomputed in the backward phase (checkpointing); block 1
    # runs outside every phase (an inference trace without phase ranges).
    ops = _ops(
        [
            ("m.h.0.mlp", "MLP", "forward", "forward", 3),
            ("m.h.0.mlp", "MLP", "backward", "forward", 3),  # recomputed forward
            ("m.h.0.mlp", "MLP", "backward", "backward", 6),
            ("m.h.1.mlp", "MLP", None, "forward", 5),
            ("m.h.1.mlp", "MLP", None, None, 1),  # no direction known
        ]
    )
    frame = shapes_module_phase(ops).with_columns(peak_tflops=pl.lit(None, pl.Float64))
    layer = layers(frame).row(0, named=True)
    assert (layer["layer"], layer["forward_ns"], layer["backward_ns"]) == ("m.h.*.mlp", 11, 6)
    per_block = {r["block"]: r for r in blocks(frame).iter_rows(named=True)}
    got = {b: (r["forward_ns"], r["backward_ns"], r["other_ns"]) for b, r in per_block.items()}
    assert got == {"m.h.0": (6, 6, 0), "m.h.1": (5, 0, 1)}
