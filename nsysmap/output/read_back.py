"""Reading an output folder back as one set, however often it is replaced meanwhile.

A commit replaces the outputs of a folder in one step (nsysmap.output.placement),
but a reader opens manifest.json and the tables one after another: one that
started before a commit could read the old manifest and a new table. `whole`
holds the manifest open while `read` runs (so that its inode cannot be reused)
and checks, after it, that the folder's manifest.json is still that file;
when it is not, a commit came between, and the read starts again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from nsysmap.core.errors import NotAnOutput
from nsysmap.output.ownership import MANIFEST

T = TypeVar("T")
TRIES = 5


def whole(out_dir: Path, read: Callable[[], T]) -> T:
    """`read()` of what the folder `out_dir` holds, from one set of outputs: read
    again while a commit replaced them meanwhile (NotAnOutput after TRIES times)."""
    manifest = Path(out_dir) / MANIFEST
    for _ in range(TRIES):
        try:
            fd = os.open(manifest, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return read()  # no manifest (or none readable): the reader says what is wrong
        try:
            before = os.fstat(fd)
            try:
                result = read()
            except Exception:
                if _still(manifest, before):
                    raise
                continue
            if _still(manifest, before):
                return result
        finally:
            os.close(fd)
    raise NotAnOutput(f"{out_dir}: its outputs were replaced {TRIES} times while read; try again")


def _still(manifest: Path, before: os.stat_result) -> bool:
    try:
        now = os.stat(manifest)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (before.st_dev, before.st_ino)
