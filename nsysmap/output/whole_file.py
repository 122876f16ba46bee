"""One output file replaced whole: written under a temporary name beside it, then renamed.

A reader of the file sees the previous file or the new one, complete, never
a part; a failure (a full disk, Ctrl-C) leaves the previous file as it was
and removes the part written. A kill leaves the temporary file,
`.NAME.nsysmap-XXXXXXXX.part`, which the next write of NAME removes when no
live nsysmap holds it.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nsysmap.core import interrupts
from nsysmap.output.swap import hold, release

PART = ".part"


@contextmanager
def written_whole(target: Path) -> Iterator[Path]:
    """A temporary path beside `target` to write the new file to; it replaces
    `target` when the block ends without an error, and is removed otherwise."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(target)
    draft = target.with_name(f".{target.name}.nsysmap-{secrets.token_hex(4)}{PART}")
    made: list[int | None] = []
    try:
        with interrupts.deferred():  # a Ctrl-C once it is made: removed below
            draft.touch(exist_ok=False)
            made.append(hold(draft))
        yield draft
        os.replace(draft, target)
    finally:
        with interrupts.deferred():
            draft.unlink(missing_ok=True)
            for lock in made:
                release(lock)


def _remove_stale(target: Path) -> None:
    """Remove the temporary files earlier writes of `target` left (killed), unless held."""
    pattern = re.compile(rf"\.{re.escape(target.name)}\.nsysmap-[0-9a-f]{{8}}{re.escape(PART)}")
    try:
        names = [n for n in os.listdir(target.parent) if pattern.fullmatch(n)]
    except OSError:
        return
    for name in names:
        stale = target.parent / name
        if stale.is_symlink() or not stale.is_file():
            continue
        lock = hold(stale, wait=False)
        if lock is not None:
            release(lock)
            stale.unlink(missing_ok=True)
