"""Writing outputs: one Parquet file per table and a manifest.json describing them."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap import schemas
from nsysmap._version import __version__
from nsysmap.model import Report
from nsysmap.output.summarize import Summaries

MANIFEST = "manifest.json"
# zstd level 1: as small as the default level here, and faster to write.
PARQUET: dict[str, Any] = {"compression": "zstd", "compression_level": 1, "statistics": True}
_HASH_CHUNK = 1 << 20


def file_sha256(path: Path, stop: threading.Event | None = None) -> str | None:
    """Hex SHA-256 of a file, read in 1 MiB chunks (None if `stop` is set meanwhile)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            if stop is not None and stop.is_set():
                return None
            digest.update(chunk)
    return digest.hexdigest()


def output_tables(ops: pl.DataFrame, summaries: Summaries) -> dict[str, pl.DataFrame]:
    """Every output table by name: `ops` first, then the summaries."""
    return {"ops": ops, **summaries.tables()}


def input_identity(path: Path | None, stop: threading.Event | None = None) -> dict[str, Any]:
    """Path, size and SHA-256 of the input file (reads the whole file; `stop` ends it early)."""
    source: dict[str, Any] = {"path": str(path) if path else None}
    if path is not None and path.is_file():
        source.update(size_bytes=path.stat().st_size, sha256=file_sha256(path, stop))
    return source


def build_manifest(
    report: Report,
    tables: Mapping[str, pl.DataFrame | int],
    *,
    options: dict[str, Any],
    source: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest: versions, input identity, options and what was written.

    `tables` maps each table to its frame, or to its row count when it was
    written elsewhere (streamed).
    """
    meta = dict(zip(report.meta["key"], report.meta["value"], strict=True))
    return {
        "nsysmap_version": __version__,
        "output_schema_version": schemas.OUTPUT_SCHEMA_VERSION,
        "backend": meta.get("backend"),
        "nsys_version": meta.get("nsys_version"),
        "export_schema_version": meta.get("export_schema_version"),
        "input": source or {"path": meta.get("source_path")},
        "options": options,
        "report_meta": meta,
        "devices": report.devices.sort("device_id").to_dicts(),
        "tables": {
            name: {"file": f"{name}.parquet", "rows": df if isinstance(df, int) else df.height}
            for name, df in tables.items()
        },
    }


def write_outputs(tables: dict[str, pl.DataFrame], manifest: dict[str, Any], out_dir: Path) -> Path:
    """Write each table as `<name>.parquet` and the manifest into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, df in tables.items():
        df.write_parquet(out_dir / f"{name}.parquet", **PARQUET)
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return out_dir


def read_outputs(out_dir: Path) -> dict[str, pl.DataFrame]:
    """Read back every table a manifest in `out_dir` lists."""
    manifest = json.loads((out_dir / MANIFEST).read_text())
    return {
        name: pl.read_parquet(out_dir / info["file"]) for name, info in manifest["tables"].items()
    }
