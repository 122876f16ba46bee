"""The kernels' launch geometry (grid and block): read for `load_profile`, whose
normalised profile is a public contract, and not for the flow, whose outputs hold
none of it (a third of the kernel table's read)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import nsysmap
from devtools.synth import write_export
from devtools.synth.tile import gpt_tables
from nsysmap.core.schemas import PROFILE_OPS
from nsysmap.read.nsys import nsys_sql, nsys_sqlite
from nsysmap.read.nsys.nsys_sqlite import read_sqlite
from nsysmap.sources.input_kinds import kind_of
from tests.cli_runner import nsysmap_cli

GEOMETRY = [f"{what}_{axis}" for what in ("grid", "block") for axis in "xyz"]


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("geometry")
    return write_export(folder / "gpt.sqlite", gpt_tables(300, seed=2, processes=1))


def _kernel_queries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    queries: list[str] = []
    select = nsys_sql.select_sql

    def recording(*args, **kwargs):
        query = select(*args, **kwargs)
        if '"CUPTI_ACTIVITY_KIND_KERNEL"' in query[0]:
            queries.append(query[0])
        return query

    monkeypatch.setattr(nsys_sql, "select_sql", recording)
    return queries


def test_load_profile_reads_the_geometry(export, monkeypatch):
    queries = _kernel_queries(monkeypatch)
    kernels = nsysmap.load_profile(export).ops.filter(pl.col("kind") == "kernel")
    assert queries and all('"gridX"' in q and '"blockZ"' in q for q in queries)
    assert kernels.select(pl.col(GEOMETRY).is_not_null().any()).row(0) == (True,) * 6


def test_the_flow_reads_the_kernels_without_it_and_nothing_else_changes(export, monkeypatch):
    queries = _kernel_queries(monkeypatch)
    opened = kind_of(export).open(export)  # as the flow opens an export
    flow = read_sqlite(opened).ops
    assert queries and not any("grid" in q or "block" in q for q in queries)
    assert flow.schema == PROFILE_OPS
    assert flow.select(pl.col(GEOMETRY).is_null().all()).row(0) == (True,) * 6
    full = read_sqlite(export).ops
    assert_frame_equal(flow.drop(GEOMETRY), full.drop(GEOMETRY))


def test_the_flow_writes_the_same_outputs_either_way(export, tmp_path, monkeypatch):
    """Outputs of the flow as it reads now, and with the geometry read as well."""
    assert nsysmap_cli(["attribute", str(export), "-o", str(tmp_path / "a"), "--quiet"]) == 0
    opened = nsys_sqlite.open_export
    monkeypatch.setattr(
        nsys_sqlite,
        "open_export",
        lambda path, **kw: opened(path, **{**kw, "launch_geometry": True}),
    )
    queries = _kernel_queries(monkeypatch)
    assert nsysmap_cli(["attribute", str(export), "-o", str(tmp_path / "b"), "--quiet"]) == 0
    assert queries and all('"gridX"' in q for q in queries)  # the geometry was read
    names = sorted(p.name for p in (tmp_path / "a").glob("*.parquet"))
    assert names and names == sorted(p.name for p in (tmp_path / "b").glob("*.parquet"))
    for name in names:
        assert_frame_equal(
            pl.read_parquet(tmp_path / "a" / name), pl.read_parquet(tmp_path / "b" / name)
        )
