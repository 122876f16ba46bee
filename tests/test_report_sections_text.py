"""report.md's sections say what their tables are: a weak inference as a guess, a cut
list of layers with an ellipsis."""

from __future__ import annotations

import polars as pl

from nsysmap.core.inert import markdown_text
from nsysmap.report.answer_doc import _confidence, _weak
from nsysmap.report.doc_sections import inferred_section, shapes_section


def test_a_weak_inference_is_said_beside_its_table():
    """dlrm: the terminal said "(inferred, weak) ... treat as a guess" while report.md
    printed the inferred table plainly."""
    row = {
        "inferred_phase": "forward",
        "inferred_region": None,
        "inferred_block": None,
        "ops": 77,
        "time_ns": 3_807_000,
        "time_share": 0.56,
        "top_kernel": "gemm",
    }
    weak = {"device_id": 0, "placed_share": 0.0, "confidence": 0.0, "weak": True, "rows": [row]}
    sure = {"device_id": 1, "placed_share": 0.9, "confidence": 1.0, "weak": False, "rows": [row]}
    text = "\n".join(inferred_section({"shown": True, "devices": [weak, sure]}))
    said = "Device 0: 0.0 % of GPU time in inferred blocks. **Weak**: no clear repeating"
    assert f"{said} structure (confidence 0.00); treat the rows below as a guess" in text
    assert "Device 1: 90.0 % of GPU time in inferred blocks.\n" in text


def test_a_devices_inference_confidence_is_weighted_by_time():
    rows = pl.DataFrame({"time_ns": [3, 1], "confidence": [1.0, 0.0]})
    assert _confidence(rows) == 0.75
    assert _confidence(rows.with_columns(confidence=None)) is None
    assert _confidence(rows.drop("confidence")) is None


def test_a_long_list_of_layers_is_cut_with_an_ellipsis():
    """The input-shapes table cut its layers at 80 characters without saying so."""
    layers = ", ".join(f"GPT2LMHeadModel_*.GPT2Model_*.GPT2Block_{i}" for i in range(4))
    row = {
        "family": "matmul",
        "aten_op": "aten::mm",
        "direction": "forward",
        "input_shapes": "[[8, 8], [8, 8]]",
        "calls": 4,
        "matmul_flop_per_call": 1024,
        "other_flop_estimate_per_call": None,
        "flop_counted": True,
        "layers": layers,
    }
    text = "\n".join(shapes_section({"unknown": None, "asked": [row]}, full=False))
    assert len(layers) > 80
    assert markdown_text(layers[:79]) + "…" in text
    short = "\n".join(shapes_section({"unknown": None, "asked": [{**row, "layers": "a"}]}, False))
    assert "| a |" in short


def test_weak_as_the_terminal_says_it():
    """hta_ddp: 18 % of the time in blocks, all of it in a pass's regions, confidence 1.0:
    sound on the terminal, so not weak here (the blocks' share is no test of it)."""
    rows = pl.DataFrame(
        {
            "inferred_block": [0, None, None],
            "inferred_region": ["block", "prefix", None],
            "time_share": [0.18, 0.80, 0.02],
            "time_ns": [18, 80, 2],
            "confidence": [1.0, 1.0, 1.0],
        }
    )
    assert _weak(rows) == {"confidence": 1.0, "weak": False, "blocks_found": True}
    unplaced = rows.with_columns(inferred_region=pl.lit(None, pl.String))
    assert _weak(unplaced)["weak"]
    no_blocks = rows.with_columns(inferred_block=pl.lit(None, pl.Int64))
    assert _weak(no_blocks) == {"confidence": 1.0, "weak": True, "blocks_found": False}


def test_passes_that_repeat_without_blocks_are_said_as_such():
    row = {
        "inferred_phase": "forward",
        "inferred_region": None,
        "inferred_block": None,
        "ops": 7,
        "time_ns": 7,
        "time_share": 1.0,
        "top_kernel": "gemm",
    }
    device = {"device_id": 0, "placed_share": 0.0, "rows": [row]}
    device |= {"confidence": 0.9, "weak": True, "blocks_found": False}
    text = "\n".join(inferred_section({"shown": True, "devices": [device]}))
    # the confidence is the kernel sequence's: beside the repeat, not beside "Weak"
    weak = "**Weak**: the sequence of operations repeats (confidence 0.90), with no repeating"
    assert weak + " blocks in it" in text
    assert "pass" not in text.split("**Weak**")[1].split(";")[0]  # the structure's word
