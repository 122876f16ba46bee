"""An output file is never written over what nsysmap reads: an input, a table, a manifest.

`nsysmap export --perfetto FILE`, `report --markdown/--html FILE` and `diff
--html FILE / -o DIR` write one file each. `check_not_over` refuses (exit 10,
before anything is computed) a FILE that is

    - the manifest.json of an output folder, or a table its manifest proves
      nsysmap wrote (nsysmap.output.ownership), in FILE's own folder or in a
      folder the command reads (`DIR/ops.parquet`, `A/manifest.json`);
    - the input a folder the command reads was made from: the file its
      manifest names (as given then, from the current folder), or a file of
      the same size and SHA-256 (the report exported to `REPORT.sqlite`);
    - for a text output (JSON, Markdown, HTML): a file nsysmap reads as a
      profile or writes as a table, by its first bytes or its name: an SQLite
      database, an Nsight Systems report, a Parquet or gzip file.

Files are compared as files (device and inode), so no other name of the same
file (a link, `DIR/../DIR/ops.parquet`) gets past.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from nsysmap.core.errors import OutputFailed
from nsysmap.output.ownership import MANIFEST, manifest_doc, proven_outputs

_PROFILE_MAGIC = (b"SQLite format 3\x00", b"PAR1", b"\x1f\x8b")
_PROFILE_SUFFIXES = (".nsys-rep", ".qdrep", ".sqlite", ".parquet")
_HASH_CHUNK = 1 << 20


def check_not_over(target: Path, reads: Sequence[Path] = (), *, text: bool = True) -> None:
    """Refuse (OutputFailed, exit 10) to write `target` over what the module's docstring
    lists; `reads`: the output folders the command reads; `text`: `target` is a text file."""
    try:
        here = os.stat(target)
    except OSError:
        return  # nothing there to write over
    if not os.path.isfile(target):
        return  # check_output_file says what is wrong
    same = (here.st_dev, here.st_ino)
    folders = [*reads, target.parent]
    for folder in folders:
        if same in _ids(_tables(folder)):
            raise _refused(target, f"{folder}'s outputs (a table or its {MANIFEST})")
    for folder in reads:
        for source in _inputs(folder):
            if _is_input(target, same, here.st_size, source):
                raise _refused(target, f"the input {folder} was made from")
    if text and _looks_like_data(target):
        raise _refused(target, "a profile or a table (by its first bytes or its name)")


def _refused(target: Path, what: str) -> OutputFailed:
    return OutputFailed(
        f"{target}: is {what}; nsysmap will not write over it: give another file name"
    )


def _tables(folder: Path) -> Iterator[Path]:
    """The manifest of `folder` and every file its manifest proves nsysmap wrote."""
    if manifest_doc(folder / MANIFEST) is None:
        return
    yield folder / MANIFEST
    files, dirs = proven_outputs(folder)
    yield from files
    for dataset in dirs:
        yield from (p for p in dataset.rglob("*") if p.is_file())


def _ids(paths: Iterator[Path]) -> set[tuple[int, int]]:
    ids = set()
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            continue
        ids.add((info.st_dev, info.st_ino))
    return ids


def _inputs(folder: Path) -> list[dict[str, Any]]:
    """The inputs the manifest of `folder` names (one report's `input`, several reports'
    `inputs`), each a mapping with `path` and, when known, `size_bytes` and `sha256`."""
    doc = manifest_doc(folder / MANIFEST)
    if doc is None:
        return []
    several = doc.get("inputs")
    listed = [doc.get("input"), *(several if isinstance(several, list) else [])]
    return [i for i in listed if isinstance(i, dict)]


def _is_input(target: Path, same: tuple[int, int], size: int, source: dict[str, Any]) -> bool:
    path = source.get("path")
    if isinstance(path, str) and path:
        try:
            info = os.stat(path)
            if (info.st_dev, info.st_ino) == same:
                return True
        except OSError:
            pass
    digest = source.get("sha256")
    return (
        source.get("size_bytes") == size and isinstance(digest, str) and _sha256(target) == digest
    )


def _sha256(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(_HASH_CHUNK):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def _looks_like_data(target: Path) -> bool:
    if target.name.lower().endswith(_PROFILE_SUFFIXES):
        return True
    try:
        with target.open("rb") as fh:
            head = fh.read(16)
    except OSError:
        return False
    return head.startswith(_PROFILE_MAGIC)
