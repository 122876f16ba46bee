"""Replacing a whole folder at once: the system calls, the mirror and the settling.

The primitives `placement.commit` is made of (nsysmap/output/placement.py
says how they make one replacement):

    exchange(a, b)      swap two folders in one step (Linux renameat2
                        RENAME_EXCHANGE); False where the system or the file
                        system has no such call, and nothing has changed
    move(a, b)          rename that never replaces: an existing `b` is an error
    mirror(dir, new)    give `new` every entry of `dir` it is told to keep:
                        files (any non-folder) hard-linked, folders recreated
                        with their mode; an entry that cannot be linked is moved
    settle(folder, dir) empty a folder of nsysmap's (a staging folder, or the
                        folder a swap took out) into `dir` without losing a
                        thing, then remove it
    hold(path)          an advisory lock (flock) on a folder, so that a folder
                        a live nsysmap is using is never settled by another
    recover(dir)        settle every staging folder of `dir` (`.DIR.nsysmap-XXXXXXXX`,
                        `staging_path`) that no live nsysmap holds

What in a folder is nsysmap's own is told by its mark, the file
`.nsysmap-staging` that `staging` puts into every folder it makes: while the
outputs are written it says everything there is nsysmap's; once they are, it
lists them, and what `mirror` then adds is the user's. A folder without the
mark is one that a swap took out of place: only what its manifest proves
nsysmap wrote (nsysmap.output.ownership) is removed from it.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import json
import os
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Collection
from contextlib import suppress
from pathlib import Path
from typing import Any

from nsysmap.output.ownership import MANIFEST, WORK_DIR, manifest_doc, proven_outputs

STAGING_MARK = ".nsysmap-"  # in the names of the folders and files nsysmap stages
MARK = ".nsysmap-staging"  # the mark of a folder nsysmap made (the module's docstring)
KEPT = ".nsysmap-kept"  # the suffix of an entry settled beside one of the same name
_MARK_KIND = "nsysmap staging folder"
_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2
_AT_FDCWD = -100
# renameat2 errors that say the call or the flag is not there (nothing was changed).
_NO_RENAMEAT2 = (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP)
# link errors that say this file system (or this file) takes no hard link here.
_NO_LINK = (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV, errno.EACCES)


def exchange(a: Path, b: Path) -> bool:
    """Swap the folders `a` and `b` atomically; False (nothing changed) where
    the kernel, the C library or the file system cannot."""
    return _renameat2(a, b, _RENAME_EXCHANGE)


def move(source: Path, target: Path) -> None:
    """Rename `source` to `target`, which must not exist (FileExistsError when it does)."""
    if _renameat2(source, target, _RENAME_NOREPLACE):
        return
    if os.path.lexists(target):  # no RENAME_NOREPLACE here: checked, then renamed
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target))
    os.rename(source, target)


def _renameat2(a: Path, b: Path, flags: int) -> bool:
    call = _libc_renameat2()
    if call is None:
        return False
    if call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in _NO_RENAMEAT2:
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


@functools.cache
def _libc_renameat2() -> Any:
    """The C library's renameat2 (glibc 2.28+, musl 1.2.5+ on Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


def staging_path(target: Path) -> Path:
    """A fresh name beside `target` for a folder `recover` takes as its staging folder."""
    return target.parent / f".{target.name}{STAGING_MARK}{secrets.token_hex(4)}"


def recover(target: Path) -> None:
    """Settle the staging folders of the folder `target` (no link) that earlier runs
    left (killed, say) and no live nsysmap holds (`settle`). Folders a swap took out go
    first, so that a `target` left missing between two renames is the old folder again."""
    pattern = re.compile(rf"\.{re.escape(target.name)}{re.escape(STAGING_MARK)}[0-9a-f]{{8}}")
    try:
        names = sorted(n for n in os.listdir(target.parent) if pattern.fullmatch(n))
    except OSError:
        return
    stale = [target.parent / n for n in names if (target.parent / n).is_dir()]
    for folder in sorted(stale, key=lambda f: read_mark(f)[0]):
        try:
            lock = None if folder.is_symlink() else hold(folder, wait=False)
        except OSError:
            lock = None
        if lock is None:
            continue  # a link, unreadable, or in use by a live nsysmap
        try:
            with suppress(OSError):  # left as it is; the next run tries again
                settle(folder, target)
        finally:
            release(lock)


def hold(folder: Path, *, wait: bool = True) -> int | None:
    """An open descriptor of `folder` holding an exclusive advisory lock on it, to
    close when done; None when another process holds it and `wait` is False.
    Where the file system has no locks, the descriptor holds none."""
    fd = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError as exc:  # no locks on this file system
        if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EBADF):
            os.close(fd)
            raise
    return fd


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def write_mark(folder: Path, outputs: Collection[str] | None = None) -> None:
    """Mark `folder` as nsysmap's: everything in it (`outputs` None), or only `outputs`."""
    doc = {"kind": _MARK_KIND, "outputs": None if outputs is None else sorted(outputs)}
    draft = folder / (MARK + ".new")
    draft.write_text(json.dumps(doc) + "\n")
    os.replace(draft, folder / MARK)


def read_mark(folder: Path) -> tuple[bool, set[str] | None]:
    """(marked, outputs): whether `folder` holds nsysmap's mark, and the outputs it
    lists (None: everything there is nsysmap's)."""
    try:
        doc = json.loads((folder / MARK).read_text())
    except (OSError, ValueError):
        return False, set()
    if not isinstance(doc, dict) or doc.get("kind") != _MARK_KIND:
        return False, set()
    outputs = doc.get("outputs")
    if outputs is None:
        return True, None
    return True, {n for n in outputs if isinstance(n, str) and n and "/" not in n}


def mirror(source: Path, target: Path, keep: Collection[str]) -> None:
    """Put into `target` the entries of `source` named in `keep`: files hard-linked
    (a link, a pipe, a socket itself), folders recreated with their mode and filled
    the same way; an entry that takes no hard link here is moved instead."""
    for name in sorted(keep):
        _mirror_entry(source / name, target / name)


def _mirror_entry(source: Path, target: Path) -> None:
    try:
        _mirror_one(source, target)
    except FileNotFoundError as exc:
        if exc.filename not in (str(source), os.fsdecode(source)):
            raise
        # removed meanwhile (another program's file, renamed over): nothing to keep


def _mirror_one(source: Path, target: Path) -> None:
    info = os.lstat(source)
    if stat.S_ISDIR(info.st_mode):
        try:
            children = sorted(os.listdir(source))
            os.mkdir(target, 0o700)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM):
                raise
            move(source, target)  # a folder it cannot read: moved whole
            return
        for child in children:
            _mirror_entry(source / child, target / child)
        os.chmod(target, stat.S_IMODE(info.st_mode))
        return
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in _NO_LINK:
            raise
        move(source, target)


def settle(folder: Path, into: Path) -> bool:
    """Empty `folder`, a folder nsysmap made or took out of place, into `into`, then
    remove it; True when it is gone. What is nsysmap's there is removed (the module's
    docstring), unless `into` is missing and `folder` was taken aside (it is renamed
    back whole); each other entry is moved into `into` where `into` lacks it, removed
    where `into` holds the very same file (a hard link of it), merged where both are
    folders, and otherwise moved beside it as `<name>.nsysmap-kept`. Nothing of
    the user's is removed."""
    marked, listed = read_mark(folder)
    if marked and listed is None:
        shutil.rmtree(folder, ignore_errors=True)
        return not os.path.lexists(folder)
    if not marked and _moved_whole(folder, into):
        return True  # a folder taken aside, `into` missing: it is `into` again, outputs and all
    for path in _own_entries(folder, listed if marked else None):
        _remove(path)
    if _moved_whole(folder, into):
        return True
    _merge(folder, into)
    try:
        os.rmdir(folder)
    except OSError:
        return False
    return True


def _moved_whole(folder: Path, into: Path) -> bool:
    """Rename `folder` to `into` when there is no `into`."""
    if os.path.lexists(into):
        return False
    into.parent.mkdir(parents=True, exist_ok=True)
    return _moved(folder, into)


def _own_entries(folder: Path, listed: set[str] | None) -> list[Path]:
    """nsysmap's entries of `folder`: those its mark lists, or (`listed` None: a folder a
    swap took out) the outputs its manifest proves, that manifest and the work folder."""
    marks = [folder / MARK, folder / (MARK + ".new")]
    if listed is not None:
        return [*(folder / n for n in sorted(listed)), *marks]
    files, dirs = proven_outputs(folder)
    own = [*files, *dirs]
    if manifest_doc(folder / MANIFEST) is not None:
        own.append(folder / MANIFEST)
    return [*own, folder / WORK_DIR, *marks]


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        path.unlink()


def _merge(source: Path, target: Path) -> None:
    """Move every entry of the folder `source` into the folder `target` (`settle`)."""
    for name in sorted(os.listdir(source)):
        entry, there = source / name, target / name
        mine = os.lstat(entry)
        try:
            theirs = os.lstat(there)
        except FileNotFoundError:
            if _moved(entry, there):
                continue
            theirs = os.lstat(there)
        if stat.S_ISDIR(mine.st_mode) and stat.S_ISDIR(theirs.st_mode):
            _merge(entry, there)
            _rmdir_quietly(entry)
        elif (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino):
            entry.unlink()  # another name of the very file `target` holds
        else:
            _move_beside(entry, there)


def _moved(entry: Path, there: Path) -> bool:
    try:
        move(entry, there)
    except FileExistsError:
        return False  # made meanwhile: compared as any other
    return True


def _move_beside(entry: Path, there: Path) -> None:
    for n in range(1, 1000):
        kept = there.with_name(there.name + KEPT + ("" if n == 1 else f"-{n}"))
        if _moved(entry, kept):
            return
    raise FileExistsError(errno.EEXIST, "no free name beside it", str(there))


def _rmdir_quietly(folder: Path) -> None:
    with suppress(OSError):  # not empty: something could not be moved; the folder stays
        os.rmdir(folder)
