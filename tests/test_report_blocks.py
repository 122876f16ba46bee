"""Per block and part (report_blocks) and calls per forward pass of the top kernels.

On the training sample (tests/test_report.py has the timeline), per block and step:

    attn   forward c_attn 3 + gemm 2 + softmax 2 + gemm 2 + c_proj 1 = 10,
           backward every gemm twice: 6 + 4 + 2 + 4 + 2             = 18
    mlp    forward 4 + 1 + 4 = 9, backward 8 + 1 + 8                 = 17
    (own)  the two residual adds, forward 2, backward 2              = 4
    ln_1, ln_2   1 + 1 each                                          = 2
    block  forward 23, backward 39                                   = 62 ms
"""

from __future__ import annotations

import polars as pl
import pytest

from nsysmap.attribution.module_names import with_block
from nsysmap.report.blocks import block_totals, part_of
from nsysmap.report.build import build_report
from nsysmap.report.report_files import read_run
from tests.samples import attributed_sample

MS = 1_000_000


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("blocks") / "train"
    attributed_sample("train", out)
    return build_report(read_run(out))


def test_block_and_part_of_a_module_path():
    paths = ["transformer.h.3.attn.c_attn", "transformer.h.3", "transformer.wte", "", "a.0.b.1.c"]
    frame = with_block(pl.DataFrame({"module": paths}))
    frame = frame.with_columns(part=part_of(pl.col("block")))
    assert frame["block"].to_list() == ["transformer.h.3", "transformer.h.3", None, None, "a.0"]
    assert frame["part"].to_list()[:2] == ["attn", ""]
    assert frame["part"][4] == "b"


@pytest.mark.slow
def test_each_block_split_by_phase_and_part(report):
    parts = report.tables["report_blocks"]
    per_step = {
        (r["block"], r["part"]): (r["forward_ns"] // 2, r["backward_ns"] // 2, r["other_ns"])
        for r in parts.iter_rows(named=True)
    }
    for block in ("transformer.h.0", "transformer.h.1"):
        assert per_step[(block, "attn")] == (10 * MS, 18 * MS, 0)
        assert per_step[(block, "mlp")] == (9 * MS, 17 * MS, 0)
        assert per_step[(block, "")] == (2 * MS, 2 * MS, 0)
        assert per_step[(block, "ln_1")] == per_step[(block, "ln_2")] == (1 * MS, 1 * MS, 0)
    classes = dict(zip(parts["part"], parts["part_class"], strict=False))
    assert classes["attn"] == "GPT2Attention" and classes[""] == "GPT2Block"
    totals = block_totals(report.findings.module_phase)
    assert totals["block"].to_list() == ["transformer.h.0", "transformer.h.1"]
    assert totals["time_ns"].to_list() == [124 * MS, 124 * MS]
    # every operation inside a block is in exactly one part
    ops = report.findings.run.ops
    in_blocks = ops.filter(pl.col("module").str.starts_with("transformer.h."))["dur_ns"].sum()
    assert parts["time_ns"].sum() == in_blocks


def test_blocks_come_in_numeric_order_past_nine():
    rows = [(f"m.h.{i}", "Block", "forward", 1, 10 - i) for i in (10, 2, 1, 11)]
    frame = pl.DataFrame(
        rows, schema=["module", "module_class", "phase", "ops", "time_ns"], orient="row"
    ).with_columns(
        device_id=pl.lit(0),
        forward_ns=pl.col("time_ns"),
        backward_ns=pl.lit(0),
        matmul_flop=pl.lit(None, pl.Int64),
        recompute_flop=pl.lit(None, pl.Int64),
        other_flop_estimate=pl.lit(None, pl.Int64),
        peak_tflops=pl.lit(None, pl.Float64),
    )
    assert block_totals(frame)["block_index"].to_list() == [1, 2, 10, 11]


def test_markdown_has_the_block_table_and_calls_per_forward_pass(report):
    md = report.markdown
    assert "## Per block: phases and parts" in md
    assert "| `transformer.h.1` | GPT2Block | 62.000 ms | 23.000 ms | 39.000 ms |" in md
    top = report.tables["report_top_kernels"].filter(
        (pl.col("scope") == "step") & (pl.col("rank") == 1)
    )
    # the sgemm: 78 calls per step over 2 steps, 26 of them in forward
    assert top["calls_per_pass"].item() == 39.0
    assert top["forward_calls_per_pass"].item() == 13.0
    assert "| this run | 2 measured steps | `ampere_sgemm_128x64_tn` | gemm | 78 | 39 | 13 |" in md
