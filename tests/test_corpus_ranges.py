"""by_range on real exports whose authors wrote their own NVTX ranges (../shared/corpus/real)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from nsysmap.core.timings import Stages
from nsysmap.flow.verbs import analyse, analyse_file, load_profile
from nsysmap.output import ops_sinks as streamed
from nsysmap.output.ops_sinks import HeldOps, OpsFile
from nsysmap.report.answers import RunData
from nsysmap.report.build import build_report
from tests.corpus import independent_gpu_totals
from tests.test_by_range import reference_by_range

pytestmark = pytest.mark.corpus

REAL = (Path(__file__).parents[1] / ".." / "shared" / "corpus" / "real").resolve()
FILES = ("cs336a2_small_fwd_emitnvtx_shapes_a100.sqlite",)
FILES += ("cs336a2_small_fwdbwd_emitnvtx_shapes_a100.sqlite",)
ATTENTION = "profile > forward pass > scaled dot product attention"
PARTS = ("computing attention scores", "masking", "computing softmax", "final matmul")


def real_path(name: str) -> Path:
    path = REAL / name
    if not path.is_file():
        pytest.skip(f"{name} is not in the corpus of real exports at {REAL}")
    return path


@pytest.fixture(scope="module", params=FILES)
def analysed(request: pytest.FixtureRequest) -> tuple[Path, object, object]:
    path = real_path(request.param)
    report = load_profile(path)
    return path, report, analyse(report)


def test_exclusive_time_equals_the_independent_gpu_total(analysed):
    path, _, analysis = analysed
    table = analysis.summaries.by_range
    sums = {
        dev: (n, t)
        for dev, n, t in table.group_by("device_id")
        .agg(pl.col("ops").sum(), pl.col("time_ns").sum())
        .iter_rows()
    }
    assert sums == independent_gpu_totals(path)


def test_rows_name_the_users_attention_ranges_in_every_layer(analysed):
    _, _, analysis = analysed
    table = analysis.summaries.by_range
    attention = table.filter(pl.col("range_path") == ATTENTION).row(0, named=True)
    assert attention["calls"] == 12  # one per layer
    parts = table.filter(pl.col("range_path").str.starts_with(ATTENTION + " > "))
    parts = parts.filter(pl.col("range_depth") == 4)
    assert set(parts["range_name"]) == set(PARTS)
    assert set(parts["calls"]) == {12}
    # The attention range holds its four parts and nothing else of its own.
    assert parts["inclusive_ns"].sum() == attention["inclusive_ns"]
    softmax = parts.filter(pl.col("range_name") == "computing softmax")
    assert 0 < softmax["inclusive_ns"][0] < attention["inclusive_ns"]


def test_operator_calls_group_by_operator_name(analysed):
    _, report, analysis = analysed
    table = analysis.summaries.by_range
    assert not table["range_path"].drop_nulls().str.contains("op_id|seq =|sizes =").any()
    raw = report.ranges.filter(pl.col("name").str.starts_with("aten::mul, "))
    mul = table.filter(pl.col("range_path") == "profile > forward pass > aten::mul")
    assert raw["name"].n_unique() > 100 and mul["calls"][0] >= 100


def test_every_row_agrees_with_a_reference_that_climbs_each_operation(analysed):
    _, report, analysis = analysed
    cols = ["calls", "ops", "time_ns", "inclusive_ops", "inclusive_ns", "span_ns"]
    table = analysis.summaries.by_range.select("device_id", "range_path", *cols)
    got = {(r[0], r[1]): tuple(r[2:]) for r in table.rows()}
    assert got == reference_by_range(analysis.ops, report.ranges)


def test_streamed_by_range_equals_the_in_memory_one(tmp_path, monkeypatch):
    path = real_path(FILES[1])
    held = analyse_file(path, tmp_path / "held", stages=Stages(progress=False))
    monkeypatch.setattr(streamed, "STREAM_OPS", 100)
    monkeypatch.setattr(streamed, "CHUNK_ROWS", 97)
    run = analyse_file(path, tmp_path / "streamed", stages=Stages(progress=False))
    assert isinstance(held.store, HeldOps) and isinstance(run.store, OpsFile)
    a, b = (pl.read_parquet(tmp_path / d / "by_range.parquet") for d in ("held", "streamed"))
    assert_frame_equal(a, b)
    assert_frame_equal(a, held.summaries.by_range)


def test_report_compares_softmax_with_matmul_through_the_users_ranges(analysed):
    _, _, analysis = analysed
    table = analysis.summaries.by_range
    run = RunData(
        "run", analysis.ops, analysis.manifest, by_range=table, structure=analysis.structure
    )
    result = build_report(run)
    assert result.findings.attention_source == "ranges"

    def inside(name: str) -> int:
        rows = table.filter(pl.col("range_path") == f"{ATTENTION} > {name}")
        return int(rows["inclusive_ns"].sum())

    times = result.findings.softmax_time
    assert times["attention_softmax"] == inside("computing softmax")
    assert times["attention_matmul"] == inside("computing attention scores") + inside(
        "final matmul"
    )
    shown = result.tables["report_ranges"].filter("user")["range_name"].to_list()
    assert set(PARTS) <= set(shown)
