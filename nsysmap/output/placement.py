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
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nsysmap.errors import OutputFailed

MANIFEST = "manifest.json"
STAGING_MARK = ".nsysmap-"


def check_output_dir(out_dir: str | os.PathLike[str]) -> Path:
    """`out_dir` as a Path, once it is or can become a writable directory (nothing is created)."""
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
    return target


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
    """Remove the outputs of a previous run in `out_dir`: its manifest first, then its
    tables (files, and the directory of a multi-rank output's operations)."""
    manifest = out_dir / MANIFEST
    files, dirs = _listed(manifest, "file"), _listed(manifest, "dir")
    manifest.unlink(missing_ok=True)
    for name in files:
        (out_dir / name).unlink(missing_ok=True)
    for name in dirs:
        shutil.rmtree(out_dir / name, ignore_errors=True)


def _listed(manifest: Path, key: str) -> list[str]:
    """The table files (`key` "file") or directories ("dir") a manifest lists
    (plain names only; [] when there is none)."""
    try:
        tables = json.loads(manifest.read_text())["tables"]
        names = [info.get(key) for info in tables.values()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    plain = [f for f in names if isinstance(f, str) and f == Path(f).name]
    return [f for f in plain if f not in (MANIFEST, ".", "..")]


def write_failed(out_dir: Path, exc: OSError) -> OutputFailed:
    """The one-line error for an OSError while writing into `out_dir`."""
    return OutputFailed(f"{out_dir}: cannot write the outputs: {exc.strerror or exc}")
