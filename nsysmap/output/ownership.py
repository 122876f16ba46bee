"""What nsysmap may remove from an output folder: only what a manifest proves it wrote.

A manifest.json nsysmap did not write proves nothing. Of the tables an
nsysmap manifest lists, a file counts when it is `<table>.parquet` (the
table's own name, a plain lower-case identifier) and a Parquet file; the
one folder is `ops/`, and only when it holds nothing but `rank=N/` folders
of Parquet files. Anything else it lists is left where it is:

    {"tables": {"by_phase": {"file": "by_phase.parquet"}}}   by_phase.parquet
    {"tables": {"t": {"file": "keep.txt"}}}                  nothing
    {"tables": {"r": {"dir": "mydata"}}}                     nothing
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

MANIFEST = "manifest.json"
# manifest.json's `schema`: the mark of a manifest nsysmap wrote.
MANIFEST_SCHEMA = "nsysmap-outputs"
OPS_DIR = "ops"  # several ranks: the operations as a Hive dataset, ops/rank=N/part-0.parquet
# Several reports: the per-report work folder inside the output folder, nsysmap's own.
WORK_DIR = ".nsysmap-work"
_TABLE_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_RANK_PART = re.compile(r"rank=-?[0-9]{1,12}")
_PARQUET_MAGIC = b"PAR1"


def proven_outputs(out_dir: Path) -> tuple[list[Path], list[Path]]:
    """The files and folders in `out_dir` that its manifest proves nsysmap wrote
    (the module's docstring says which)."""
    doc = manifest_doc(out_dir / MANIFEST)
    if doc is None:
        return [], []
    files = [out_dir / f for f in _listed(doc, "file") if _is_parquet(out_dir / f)]
    dirs = [out_dir / d for d in _listed(doc, "dir") if _is_ops_dataset(out_dir / d)]
    return files, dirs


def own_manifest(doc: object) -> bool:
    """Is `doc` (a parsed manifest.json) one nsysmap wrote? Its `schema` mark, or, in
    manifests written before the mark, its version keys; and a `tables` mapping."""
    if not isinstance(doc, dict) or not isinstance(doc.get("tables"), dict):
        return False
    if "schema" in doc:
        return bool(doc["schema"] == MANIFEST_SCHEMA)
    return isinstance(doc.get("nsysmap_version"), str) and isinstance(
        doc.get("output_schema_version"), str
    )


def manifest_doc(manifest: Path) -> dict[str, object] | None:
    """The parsed manifest when it is a regular file nsysmap wrote (`own_manifest`), else None."""
    try:
        if manifest.is_symlink():
            return None
        doc = json.loads(manifest.read_bytes())
    except (OSError, ValueError):
        return None
    return doc if own_manifest(doc) else None


def _listed(doc: dict[str, object], key: str) -> list[str]:
    """The names a manifest's tables give under `key` that are nsysmap's own:
    "file": `<table>.parquet` for a table named as nsysmap names them; "dir": `ops`."""
    tables = doc.get("tables")
    assert isinstance(tables, dict)
    names = []
    for table, info in tables.items():
        name = info.get(key) if isinstance(info, dict) else None
        if not isinstance(table, str) or not _TABLE_NAME.fullmatch(table):
            continue
        if (key == "file" and name == f"{table}.parquet") or (key == "dir" and name == OPS_DIR):
            names.append(name)
    return names


def _is_parquet(path: Path) -> bool:
    """A regular file (not a link) that opens and ends with Parquet's magic bytes."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size < 12:
            return False
        with path.open("rb") as fh:
            head = fh.read(4)
            fh.seek(-4, os.SEEK_END)
            return head == _PARQUET_MAGIC and fh.read(4) == _PARQUET_MAGIC
    except OSError:
        return False


def _is_ops_dataset(path: Path) -> bool:
    """A folder (not a link) of `rank=N/` folders that hold only Parquet files."""
    if path.is_symlink() or not path.is_dir():
        return False
    for part in entries(path):
        if part.is_symlink() or not part.is_dir() or not _RANK_PART.fullmatch(part.name):
            return False
        if not all(_is_parquet(f) for f in entries(part)):
            return False
    return True


def entries(folder: Path) -> list[Path]:
    """The entries of `folder` ([] when it cannot be listed)."""
    try:
        return list(folder.iterdir())
    except OSError:
        return []
