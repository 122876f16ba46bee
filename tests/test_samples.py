"""Golden outputs of the synthetic sample exports, and the builder's determinism."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from nsysmap.core.findings_schema import FINDINGS
from nsysmap.core.inferred_schemas import INFERRED_SCHEMAS
from nsysmap.core.schemas import OPS
from nsysmap.flow.verbs import load_profile
from nsysmap.structure.table import STRUCTURE
from nsysmap.summaries.summarise import SUMMARY_SCHEMAS
from nsysmap.waits.tables import SCHEMAS as WAITS_SCHEMAS
from sample_reports.build import SAMPLES, build
from sample_reports.golden import attributed_tables, read_golden, to_csv_frame

HERE = Path(__file__).parents[1] / "sample_reports"
SCHEMAS = {"ops": OPS, **SUMMARY_SCHEMAS, **WAITS_SCHEMAS, **INFERRED_SCHEMAS}
SCHEMAS["structure"] = STRUCTURE
SCHEMAS["findings"] = FINDINGS


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_outputs_match_golden_files(name):
    tables = attributed_tables(HERE / f"{name}.sqlite")
    assert set(tables) == set(SCHEMAS)
    for table, df in tables.items():
        golden = read_golden(HERE / "expected" / name / f"{table}.csv", SCHEMAS[table])
        assert_frame_equal(to_csv_frame(df), golden, check_exact=False, rel_tol=1e-9), table


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_committed_sample_is_what_the_builder_writes(name, tmp_path):
    fresh = tmp_path / f"{name}.sqlite"
    build(SAMPLES[name]).write(fresh)
    committed, rebuilt = load_profile(HERE / f"{name}.sqlite"), load_profile(fresh)
    for frame in ("ops", "api_calls", "ranges", "threads", "devices"):
        assert_frame_equal(getattr(committed, frame), getattr(rebuilt, frame)), frame


@pytest.mark.slow
def test_training_sample_attributes_backward_to_modules_and_phases():
    ops = attributed_tables(HERE / "gpt2_tiny_train.sqlite")["ops"]
    bwd = ops.filter(pl.col("tid") == 2)
    assert bwd.height > 0 and set(bwd["phase"]) == {"backward"}
    c_fc = bwd.filter(pl.col("module") == "transformer.h.1.mlp.c_fc")
    assert c_fc.height == 4 and set(c_fc["direction"]) == {"backward"}  # 2 steps x 2 gemms
    assert set(ops.filter(pl.col("category") == "optimizer")["phase"]) == {"optimizer"}
    assert set(ops["attribution"]) == {"range", "other_thread", "no_range", "no_launch"}
