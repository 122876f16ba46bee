"""Writing outputs: one Parquet file per table and a manifest.json describing them.

The one writer of both layouts: one report's output directory, and that of
several reports (the ranks of one job, nsysmap.many), which is the same
directory with a leading `rank` column in every per-device table, the
operations as a Hive-partitioned dataset (`ops/rank=N/part-0.parquet`) and
the tables that compare ranks. Every table with a declared schema is
written in it (`declared`): the summaries (SUMMARY_TABLES) and the waits
per device, each declared once and given its `rank` here, and the
cross-rank tables (ACROSS_RANKS).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from nsysmap._version import __version__
from nsysmap.core import inferred_schemas, rank_schemas, schemas
from nsysmap.core.findings_schema import FINDINGS
from nsysmap.core.profile import Profile
from nsysmap.output.placement import (
    MANIFEST,
    MANIFEST_SCHEMA,
    OPS_DIR,
    commit,
    staging,
    write_failed,
)
from nsysmap.output.read_back import whole
from nsysmap.output.text_parquet import write_coded
from nsysmap.summaries.summarise import SUMMARY_SCHEMAS
from nsysmap.waits.tables import SCHEMAS as WAITS_SCHEMAS

_HASH_CHUNK = 1 << 20
OPS_FILE = "ops.parquet"
RANKS_LAYOUT = "ranks"  # the manifest's `layout` of several ranks (one report's has none)
# The tables kept per device: in the multi-rank layout each gains a leading `rank`.
PER_DEVICE: dict[str, pl.Schema] = {**SUMMARY_SCHEMAS, **WAITS_SCHEMAS}
# The tables only several ranks have: they compare the ranks (nsysmap.many.cross_rank).
ACROSS_RANKS: dict[str, pl.Schema] = {
    "ranks": rank_schemas.RANKS,
    "rank_steps": rank_schemas.RANK_STEPS,
    "stragglers": rank_schemas.STRAGGLERS,
    "rank_module_phase": rank_schemas.RANK_MODULE_PHASE,
    "rank_module": rank_schemas.RANK_MODULE,
    "rank_comm": rank_schemas.RANK_COMM,
}
# The tables of either layout in a schema of their own (findings: one per report or job).
WHOLE: dict[str, pl.Schema] = {"findings": FINDINGS}
# The names the outputs of `attribute` and `run` take in their folder, which nsysmap
# replaces only where a manifest of its own proves it wrote them (placement.check_replaceable).
OUTPUT_NAMES = frozenset(
    {
        OPS_FILE,
        OPS_DIR,
        *(
            f"{name}.parquet"
            for name in (*PER_DEVICE, *ACROSS_RANKS, *inferred_schemas.INFERRED_SCHEMAS, *WHOLE)
        ),
    }
)


class PlacesOps(Protocol):
    """The OPS rows of an analysis, wherever they are (nsysmap.output.ops_sinks)."""

    def place(self, folder: Path) -> None: ...  # put them into `folder` as ops.parquet


def file_sha256(path: Path, stop: threading.Event | None = None) -> str | None:
    """Hex SHA-256 of a file, read in 1 MiB chunks (None if `stop` is set meanwhile)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            if stop is not None and stop.is_set():
                return None
            digest.update(chunk)
    return digest.hexdigest()


def input_identity(path: Path | None, stop: threading.Event | None = None) -> dict[str, Any]:
    """Path, size and SHA-256 of the input file (reads the whole file; `stop` ends it early)."""
    source: dict[str, Any] = {"path": str(path) if path else None}
    if path is not None and path.is_file():
        source.update(size_bytes=path.stat().st_size, sha256=file_sha256(path, stop))
    return source


def build_manifest(
    profile: Profile,
    tables: Mapping[str, pl.DataFrame | int],
    *,
    options: dict[str, Any],
    source: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest: versions, input identity, options and what was written.

    `tables` maps each table to its frame, or to its row count (ops: the
    rows may be held or streamed, nsysmap.output.ops_sinks).
    """
    meta = dict(zip(profile.meta["key"], profile.meta["value"], strict=True))
    return {
        "schema": MANIFEST_SCHEMA,
        "nsysmap_version": __version__,
        "output_schema_version": schemas.OUTPUT_SCHEMA_VERSION,
        "backend": meta.get("backend"),
        "nsys_version": meta.get("nsys_version"),
        "export_schema_version": meta.get("export_schema_version"),
        "input": source or {"path": meta.get("source_path")},
        "options": options,
        "report_meta": meta,
        "devices": profile.devices.sort("device_id").to_dicts(),
        "tables": table_entries(tables),
    }


def table_entries(
    tables: Mapping[str, pl.DataFrame | int], *, ranked: bool = False
) -> dict[str, dict[str, Any]]:
    """The manifest's `tables`: each table's file and row count (a count: written elsewhere).

    `ranked`: the multi-rank layout, whose `ops` is a Hive dataset (a directory
    partitioned by rank), not a file."""
    entries = {
        name: {"file": f"{name}.parquet", "rows": df if isinstance(df, int) else df.height}
        for name, df in tables.items()
    }
    if ranked and "ops" in entries:
        rows = entries["ops"]["rows"]
        entries["ops"] = {"dir": OPS_DIR, "partitioning": "hive", "key": "rank", "rows": rows}
    return entries


def write_outputs(
    tables: dict[str, pl.DataFrame],
    manifest: dict[str, Any],
    out_dir: Path,
    *,
    ops: PlacesOps,
    ranked: bool = False,
) -> Path:
    """Write `ops`, each table as `<name>.parquet` and the manifest, replacing `out_dir`'s outputs.

    Tables with a declared schema are checked against it first (`declared`;
    `ranked`: the multi-rank layout). Everything is written into a staging
    folder and then moved into place as a whole (`nsysmap.output.placement`).
    `ops` puts the operations there itself (`nsysmap.output.ops_sinks`:
    ops.parquet written from memory, or moved or copied; nsysmap.many: each
    rank's part moved into the ops dataset).
    """
    out_dir = Path(out_dir)
    with staging(out_dir) as folder:
        try:
            ops.place(folder)
            for name, df in tables.items():
                written = declared(name, df, ranked=ranked)
                write_coded([written], written.schema, folder / f"{name}.parquet")
            text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
            (folder / MANIFEST).write_text(text)
        except OSError as exc:
            raise write_failed(out_dir, exc) from None
        commit(folder, out_dir)
    return out_dir


def declared(name: str, df: pl.DataFrame, *, ranked: bool = False) -> pl.DataFrame:
    """`df` as written: a table of PER_DEVICE exactly in its declared schema, with a
    leading `rank` when `ranked`, one of ACROSS_RANKS or WHOLE in its own
    (schemas.SchemaMismatch otherwise); any other table as it is."""
    schema = PER_DEVICE.get(name)
    if schema is not None and ranked:
        schema = rank_schemas.with_rank(schema)
    if schema is None and ranked:
        schema = ACROSS_RANKS.get(name)
    schema = schema or WHOLE.get(name)
    return df if schema is None else schemas.conform(df, schema, name)


def read_outputs(out_dir: Path) -> dict[str, pl.DataFrame]:
    """Read back every table a manifest in `out_dir` lists (of either layout: the
    operations of several ranks as one frame, with their `rank`), all of one set
    however often the folder is replaced meanwhile (nsysmap.output.read_back)."""

    def read() -> dict[str, pl.DataFrame]:
        manifest = json.loads((out_dir / MANIFEST).read_text())
        return {name: _read_table(out_dir, info) for name, info in manifest["tables"].items()}

    return whole(Path(out_dir), read)


def _read_table(out_dir: Path, info: dict[str, Any]) -> pl.DataFrame:
    if "dir" in info:  # a Hive dataset (several ranks' operations)
        return pl.read_parquet(out_dir / info["dir"], hive_partitioning=True)
    return pl.read_parquet(out_dir / info["file"])
