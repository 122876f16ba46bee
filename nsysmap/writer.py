"""Writing outputs: one Parquet file per table and a manifest.json describing them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap import schemas
from nsysmap._version import __version__
from nsysmap.model import Report
from nsysmap.summarize import Summaries

MANIFEST = "manifest.json"
_HASH_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def output_tables(ops: pl.DataFrame, summaries: Summaries) -> dict[str, pl.DataFrame]:
    """Every output table by name: `ops` first, then the summaries."""
    return {"ops": ops, **summaries.tables()}


def input_identity(path: Path | None) -> dict[str, Any]:
    """Path, size and SHA-256 of the input file (reads the whole file)."""
    source: dict[str, Any] = {"path": str(path) if path else None}
    if path is not None and path.is_file():
        source.update(size_bytes=path.stat().st_size, sha256=file_sha256(path))
    return source


def build_manifest(
    report: Report,
    tables: dict[str, pl.DataFrame],
    *,
    options: dict[str, Any],
    source: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest: versions, input identity, options and what was written."""
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
            name: {"file": f"{name}.parquet", "rows": df.height} for name, df in tables.items()
        },
    }


def write_outputs(tables: dict[str, pl.DataFrame], manifest: dict[str, Any], out_dir: Path) -> Path:
    """Write each table as `<name>.parquet` and the manifest into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, df in tables.items():
        df.write_parquet(out_dir / f"{name}.parquet", statistics=True)
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return out_dir


def read_outputs(out_dir: Path) -> dict[str, pl.DataFrame]:
    """Read back every table a manifest in `out_dir` lists."""
    manifest = json.loads((out_dir / MANIFEST).read_text())
    return {
        name: pl.read_parquet(out_dir / info["file"]) for name, info in manifest["tables"].items()
    }
