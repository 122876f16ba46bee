"""Where outputs go: checking the output directory, and replacing outputs as a whole.

Outputs are written into a staging folder beside the target directory
(`DIR/../.DIR.nsysmap-XXXX`, same file system) and then moved into place:

    DIR does not exist   the staging folder is renamed to DIR (atomic)
    DIR exists           the old manifest.json goes first, then the old outputs
                         it lists; the new files are moved in, manifest.json last

manifest.json is the mark of a complete set: while it is absent the folder
holds no outputs nsysmap stands by (`nsysmap report` refuses it). A failure
before the move leaves the old outputs complete and untouched; a failure
during it removes every output file, old and new. Files nsysmap did not
write (run.json, capture/, report.md, the user's own) are left alone.
Every OSError becomes OutputFailed (exit 10) with a one-line message.

Only what a manifest proves nsysmap wrote is ever removed (`proven_outputs`):
the manifest must be nsysmap's own (its `schema` mark, or the version keys of
manifests written before the mark), and of the tables it lists only a
Parquet file named `<table>.parquet` and the operations dataset `ops/`
holding nothing but `rank=N/*.parquet` count. A folder whose manifest.json
is not nsysmap's, or that holds a file named like an output with no
nsysmap manifest listing it, is refused before anything runs
(`check_replaceable`, exit 10).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

from nsysmap.core.errors import OutputFailed

MANIFEST = "manifest.json"
STAGING_MARK = ".nsysmap-"
# manifest.json's `schema`: the mark of a manifest nsysmap wrote.
MANIFEST_SCHEMA = "nsysmap-outputs"
OPS_DIR = "ops"  # several ranks: the operations as a Hive dataset, ops/rank=N/part-0.parquet
_TABLE_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_RANK_PART = re.compile(r"rank=-?[0-9]{1,12}")
_PARQUET_MAGIC = b"PAR1"


def check_output_dir(
    out_dir: str | os.PathLike[str], replacing: Collection[str] | None = None
) -> Path:
    """`out_dir` as a Path, once it is or can become a writable directory (nothing is
    created); with `replacing` (the names outputs will take there), once nsysmap may
    replace what is there (`check_replaceable`)."""
    target = Path(out_dir)
    _check_length(target)
    try:
        if target.exists() and not target.is_dir():
            raise OutputFailed(f"{target}: exists and is not a directory; give a directory")
        existing = target
        while not existing.exists():
            if existing.is_symlink():
                raise OutputFailed(f"{target}: {existing} is a broken symbolic link")
            existing = existing.parent
    except OSError as exc:
        raise write_failed(target, exc) from None
    if not existing.is_dir():
        raise OutputFailed(f"{target}: cannot be created, {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == target else f" ({existing} is not writable)"
        raise OutputFailed(f"{target}: cannot write there{where}: Permission denied")
    if replacing is not None and existing == target:
        check_replaceable(target, replacing)
    return target


def check_replaceable(out_dir: Path, writes: Collection[str] = ()) -> None:
    """Refuse (OutputFailed, exit 10) a folder whose outputs nsysmap could only replace
    by overwriting what it cannot prove it wrote: a manifest.json that is not nsysmap's,
    or an entry named as one of `writes` (the names about to be written) that no
    nsysmap manifest there proves nsysmap's (`proven_outputs`)."""
    manifest = out_dir / MANIFEST
    if manifest.exists() and _manifest_doc(manifest) is None:
        raise OutputFailed(
            f"{out_dir}: its {MANIFEST} was not written by nsysmap, so nsysmap will not "
            "replace anything there; give another output folder"
        )
    files, dirs = proven_outputs(out_dir)
    proven = {p.name for p in (*files, *dirs)}
    stray = sorted(n for n in set(writes) - proven if os.path.lexists(out_dir / n))
    if stray:
        more = f" (and {len(stray) - 1} more)" if len(stray) > 1 else ""
        raise OutputFailed(
            f"{out_dir}: holds {stray[0]}{more}, which nsysmap did not write there; "
            "nsysmap will not overwrite it: move it or give another output folder"
        )


def check_output_file(path: str | os.PathLike[str]) -> Path:
    """`path` as a Path, once a file can be written there (nothing is created)."""
    target = Path(path)
    _check_length(target)
    if target.is_dir():
        raise OutputFailed(f"{target}: is a directory; give a file name for the output")
    if target.exists() and not os.access(target, os.W_OK):
        raise OutputFailed(f"{target}: cannot write it: Permission denied")
    if target.parent.exists() and not target.parent.is_dir():
        raise OutputFailed(f"{target}: cannot be created, {target.parent} is a file")
    check_output_dir(target.parent)
    return target


def write_file(target: Path, text: str) -> Path:
    """Write `text` (UTF-8) to the file `target`, its folder made (OSError: OutputFailed)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise OutputFailed(f"{target}: cannot write it: {exc.strerror or exc}") from None
    return target


def _check_length(target: Path) -> None:
    limit = _limit("PC_NAME_MAX", 255)
    long_part = next((p for p in target.parts if len(os.fsencode(p)) > limit), None)
    if long_part is not None:
        raise OutputFailed(f"{target}: a path component is longer than {limit} bytes")
    if len(os.fsencode(str(target.absolute()))) + 64 > _limit("PC_PATH_MAX", 4096):
        raise OutputFailed(f"{target}: path too long")


def _limit(name: str, default: int) -> int:
    try:
        return int(os.pathconf("/", name))
    except (OSError, ValueError, AttributeError):
        return default


@contextmanager
def staging(out_dir: Path) -> Iterator[Path]:
    """A fresh staging folder beside `out_dir`, removed on exit unless `commit` moved it."""
    parent = out_dir.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}{STAGING_MARK}", dir=parent))
    except OSError as exc:
        raise write_failed(out_dir, exc) from None
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def commit(folder: Path, out_dir: Path) -> Path:
    """Move the outputs staged in `folder` (manifest.json among them) into `out_dir`."""
    try:
        if not out_dir.exists():
            folder.rename(out_dir)
            return out_dir
    except OSError:
        pass  # created meanwhile, or not renamable: file by file below
    new = sorted(p.name for p in folder.iterdir() if p.name != MANIFEST)
    check_replaceable(out_dir, new)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        remove_outputs(out_dir)
        for name in [*new, MANIFEST]:
            os.replace(folder / name, out_dir / name)
    except OSError as exc:
        for name in [*new, MANIFEST]:
            (out_dir / name).unlink(missing_ok=True)
        raise write_failed(out_dir, exc) from None
    return out_dir


def remove_outputs(out_dir: Path) -> None:
    """Remove the outputs of a previous run in `out_dir`: its manifest first, then the
    tables it proves nsysmap wrote (`proven_outputs`). A manifest that is not nsysmap's
    is refused (OutputFailed), and nothing is removed."""
    check_replaceable(out_dir)
    files, dirs = proven_outputs(out_dir)
    (out_dir / MANIFEST).unlink(missing_ok=True)
    for path in files:
        path.unlink(missing_ok=True)
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)


def proven_outputs(out_dir: Path) -> tuple[list[Path], list[Path]]:
    """The files and folders in `out_dir` that its manifest proves nsysmap wrote.

    A manifest.json nsysmap did not write proves nothing. Of the tables an
    nsysmap manifest lists, a file counts when it is `<table>.parquet` (the
    table's own name, a plain lower-case identifier) and a Parquet file; the
    one folder is `ops/`, and only when it holds nothing but `rank=N/` folders
    of Parquet files. Anything else it lists is left where it is:

        {"tables": {"by_phase": {"file": "by_phase.parquet"}}}   by_phase.parquet
        {"tables": {"t": {"file": "keep.txt"}}}                  nothing
        {"tables": {"r": {"dir": "mydata"}}}                     nothing
    """
    doc = _manifest_doc(out_dir / MANIFEST)
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


def _manifest_doc(manifest: Path) -> dict[str, object] | None:
    """The parsed manifest when it is nsysmap's (`own_manifest`), else None."""
    try:
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
    for part in _entries(path):
        if part.is_symlink() or not part.is_dir() or not _RANK_PART.fullmatch(part.name):
            return False
        if not all(_is_parquet(f) for f in _entries(part)):
            return False
    return True


def _entries(folder: Path) -> list[Path]:
    """The entries of `folder` ([] when it cannot be listed)."""
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def write_failed(out_dir: Path, exc: OSError) -> OutputFailed:
    """The one-line error for an OSError while writing into `out_dir`."""
    return OutputFailed(f"{out_dir}: cannot write the outputs: {exc.strerror or exc}")
