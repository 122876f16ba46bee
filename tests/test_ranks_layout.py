"""One output layout: several ranks are written by the one writer (nsysmap.output.writer).

Without Dask: the parts a worker leaves are placed by `RankParts` through
`write_outputs`, which checks every table against its one declaration (a
per-device table with a leading rank), lists the ops dataset in the
manifest, and replaces an earlier output, of either layout, as a whole.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from nsysmap.core import rank_schemas, schemas, wait_schemas
from nsysmap.many.collect import ranks_table
from nsysmap.many.rank_ids import FILE_ORDER, RankOf
from nsysmap.many.task import OK, Outcome, Unit
from nsysmap.many.write import RankParts, ranks_manifest
from nsysmap.output.ops_sinks import HeldOps
from nsysmap.output.placement import MANIFEST_SCHEMA
from nsysmap.output.writer import (
    ACROSS_RANKS,
    PER_DEVICE,
    read_outputs,
    table_entries,
    write_outputs,
)

OPS = pl.DataFrame({"op_id": [1, 2, 3], "dur_ns": [5, 6, 7]})


def _ranks(work: Path, sizes: list[int]) -> list[RankOf]:
    """One rank per size, each its own report with a part of that many operations."""
    ranks = []
    for rank, n in enumerate(sizes):
        part = work / f"ops-{rank}.parquet"
        OPS.head(n).write_parquet(part)
        unit = Unit(100 + rank, (0,), n, int(OPS.head(n)["dur_ns"].sum()), str(part))
        ranks.append(RankOf(rank, rank, f"r{rank}.sqlite", unit, FILE_ORDER, None))
    return ranks


def _tables(ranks: list[RankOf]) -> dict[str, pl.DataFrame]:
    per_device = {n: schemas.empty(rank_schemas.with_rank(s)) for n, s in PER_DEVICE.items()}
    return {"ranks": ranks_table(ranks), **per_device}


def _write_ranks(out: Path, work: Path, sizes: list[int]) -> dict:
    work.mkdir(exist_ok=True)
    ranks = _ranks(work, sizes)
    outcomes = [Outcome(r.index, r.path, OK, units=(r.unit,)) for r in ranks]
    tables = _tables(ranks)
    manifest = ranks_manifest(outcomes, ranks, tables, rank_rule="", options={}, cluster={})
    write_outputs(tables, manifest, out, ops=RankParts(ranks), ranked=True)
    return json.loads((out / "manifest.json").read_text())


def test_ranks_are_written_by_the_one_writer(tmp_path: Path) -> None:
    out = tmp_path / "out"
    manifest = _write_ranks(out, tmp_path / "work", [3, 2])
    ops = pl.read_parquet(out / "ops", hive_partitioning=True)
    assert ops.group_by("rank").len().sort("rank").rows() == [(0, 3), (1, 2)]
    assert manifest["tables"]["ops"] == {
        "dir": "ops",
        "partitioning": "hive",
        "key": "rank",
        "rows": 5,
    }
    for name in [*PER_DEVICE, "ranks"]:
        assert manifest["tables"][name] == {
            "file": f"{name}.parquet",
            "rows": pl.read_parquet(out / f"{name}.parquet").height,
        }
    idle = pl.read_parquet(out / "idle.parquet")
    assert idle.schema == rank_schemas.with_rank(wait_schemas.IDLE)
    read = read_outputs(out)  # the one reader reads either layout
    assert set(read) == set(manifest["tables"])
    assert read["ops"].group_by("rank").len().sort("rank").rows() == [(0, 3), (1, 2)]
    assert not list((tmp_path / "work").iterdir())  # the parts were moved, not copied


def test_the_writer_holds_each_table_of_several_ranks_to_its_one_declaration(
    tmp_path: Path,
) -> None:
    """A per-device table needs its rank; a cross-rank table its own columns."""
    rankless = {"stream_idle": schemas.empty(wait_schemas.STREAM_IDLE)}
    with pytest.raises(schemas.SchemaMismatch, match="stream_idle"):
        write_outputs(rankless, {}, tmp_path / "a", ops=RankParts([]), ranked=True)
    comm = schemas.empty(ACROSS_RANKS["rank_comm"]).with_columns(pl.lit(1).alias("extra_ns"))
    with pytest.raises(schemas.SchemaMismatch, match="rank_comm"):
        write_outputs({"rank_comm": comm}, {}, tmp_path / "b", ops=RankParts([]), ranked=True)


def test_an_output_of_either_layout_replaces_the_other_as_a_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _write_ranks(out, tmp_path / "work", [3, 2, 1])
    _write_ranks(out, tmp_path / "work", [2])  # fewer ranks: no partition left of the old
    assert sorted(p.name for p in (out / "ops").iterdir()) == ["rank=0"]
    table = {"by_phase": schemas.empty(schemas.BY_PHASE)}
    write_outputs(
        table,
        {"schema": MANIFEST_SCHEMA, "tables": table_entries({"ops": 3, **table})},
        out,
        ops=HeldOps(OPS),
    )
    assert sorted(p.name for p in out.iterdir()) == [
        "by_phase.parquet",
        "manifest.json",
        "ops.parquet",
    ]
    _write_ranks(out, tmp_path / "work", [1])
    assert not (out / "ops.parquet").exists() and (out / "ops" / "rank=0").is_dir()
