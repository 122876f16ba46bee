"""Where outputs go: checking the output folder, and replacing its outputs as a whole.

Outputs are written into a staging folder beside the output folder
(`DIR/../.DIR.nsysmap-XXXXXXXX`, same file system, made with the user's
umask) and then put in place in one step (`commit`):

    DIR does not exist   the staging folder is renamed to DIR
    DIR exists           every entry of DIR but the outputs its manifest proves
                         nsysmap wrote is hard-linked into the staging folder
                         (folders recreated with their mode; an entry that takes
                         no link is moved), which takes DIR's mode; the two
                         folders are swapped in one rename (RENAME_EXCHANGE);
                         what was made in the old folder meanwhile is moved into
                         DIR, and the old folder is removed (swap.settle)

So at every instant DIR holds either the complete old outputs or the complete
new ones, with every file of the user's. Where the system has no
RENAME_EXCHANGE, DIR is renamed aside and the staging folder renamed to DIR:
between the two renames there is no DIR (never a mix). A kill at any point
leaves staging folders that the next write into DIR settles (`recover`):
nsysmap's own files in them are removed, anything else is moved back into
DIR. A folder nsysmap cannot rename (a mount point, another user's folder in
a sticky directory) is refused, nothing changed. Every OSError becomes
OutputFailed (exit 10) with a one-line message; a Ctrl-C during the swap is
taken once it is done.

Only what a manifest proves nsysmap wrote is ever removed
(nsysmap.output.ownership). A folder whose manifest.json is not nsysmap's,
or that holds a file named like an output with no nsysmap manifest listing
it, is refused before anything runs (`check_replaceable`, exit 10).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from nsysmap.core import interrupts
from nsysmap.core.errors import OutputFailed
from nsysmap.output.ownership import (
    MANIFEST,
    MANIFEST_SCHEMA,
    OPS_DIR,
    WORK_DIR,
    manifest_doc,
    own_manifest,
    proven_outputs,
)
from nsysmap.output.swap import (
    MARK,
    STAGING_MARK,
    exchange,
    hold,
    mirror,
    move,
    recover,
    release,
    settle,
    staging_path,
    write_mark,
)
from nsysmap.output.whole_file import written_whole

__all__ = [
    "MANIFEST",
    "MANIFEST_SCHEMA",
    "OPS_DIR",
    "STAGING_MARK",
    "WORK_DIR",
    "own_manifest",
    "proven_outputs",
    "recover",
]

LOCK_WAIT_S = 60.0  # how long a commit waits for another nsysmap replacing the same folder


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
        _check_renamable(target)
        check_replaceable(target, replacing)
    return target


def check_replaceable(out_dir: Path, writes: Collection[str] = ()) -> None:
    """Refuse (OutputFailed, exit 10) a folder whose outputs nsysmap could only replace
    by overwriting what it cannot prove it wrote: a manifest.json that is not nsysmap's,
    or an entry named as one of `writes` (the names about to be written) that no
    nsysmap manifest there proves nsysmap's (`proven_outputs`)."""
    manifest = out_dir / MANIFEST
    if manifest.exists() and manifest_doc(manifest) is None:
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
    """Write `text` (UTF-8) to the file `target`, whole (nsysmap.output.whole_file), its
    folder made (OSError: OutputFailed)."""
    try:
        with written_whole(target) as draft:
            draft.write_text(text, encoding="utf-8")
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
    """A fresh staging folder beside `out_dir`, locked while in use; the stale ones of
    earlier runs are settled first (`recover`), and this one is on exit unless `commit`
    put it in place."""
    target = _real(out_dir)
    made: list[tuple[Path, int | None]] = []
    try:
        try:
            recover(target)  # earlier runs' staging folders, killed, say
            with interrupts.deferred():  # a Ctrl-C once it is made: removed below
                made.append(_new_staging(target))
        except OSError as exc:
            raise write_failed(out_dir, exc) from None
        yield made[0][0]
    finally:
        for folder, lock in made:
            with interrupts.deferred(), suppress(OSError):  # else left for the next run
                if os.path.lexists(folder):
                    settle(folder, target)
            release(lock)


def _check_renamable(out_dir: Path) -> None:
    """Refuse (OutputFailed) an output folder that is a mount point: it cannot be swapped."""
    target = _real(out_dir)
    if target.is_dir() and (
        os.path.ismount(target) or os.stat(target).st_dev != os.stat(target.parent).st_dev
    ):
        raise OutputFailed(
            f"{out_dir}: is a mount point, and nsysmap replaces an output folder by "
            "swapping it with a new one beside it: give a folder inside it"
        )


def _new_staging(target: Path) -> tuple[Path, int | None]:
    target.parent.mkdir(parents=True, exist_ok=True)
    _check_renamable(target)
    while True:
        folder = staging_path(target)
        try:
            os.mkdir(folder, 0o777)  # the user's umask applies, as to any folder they make
        except FileExistsError:
            continue
        lock = hold(folder)
        write_mark(folder)
        return folder, lock


def commit(folder: Path, out_dir: Path) -> Path:
    """Put the outputs staged in `folder` in place of `out_dir`'s (the module's docstring)."""
    target = _real(out_dir)
    new = sorted(n for n in os.listdir(folder) if n != MARK)
    try:
        with interrupts.deferred():
            if not _placed_new(folder, target):
                _swap_in(folder, target, new, out_dir)
            if MANIFEST in new:
                interrupts.completed(out_dir)
    except OSError as exc:
        raise write_failed(out_dir, exc) from None
    return out_dir


def _placed_new(folder: Path, target: Path) -> bool:
    """Rename `folder` to `target` when there is no `target` (True once done). Its mark
    goes first: a staging folder without it is settled by what its manifest proves."""
    if os.path.lexists(target):
        return False
    (folder / MARK).unlink()
    try:
        move(folder, target)
    except FileExistsError:
        return False  # made meanwhile
    return True


def _swap_in(folder: Path, target: Path, new: list[str], out_dir: Path) -> None:
    """Swap `folder` with the existing `target`, every entry of the user's kept: marked
    with its outputs while the user's are linked in, unmarked before the swap."""
    write_mark(folder, new)
    lock = _hold_waiting(target, out_dir)
    try:
        check_replaceable(target, [n for n in new if n != MANIFEST])
        files, dirs = proven_outputs(target)
        own = {p.name for p in (*files, *dirs)} | {MANIFEST, MARK, WORK_DIR}
        mirror(target, folder, [n for n in os.listdir(target) if n not in own])
        os.chmod(folder, stat.S_IMODE(os.stat(target).st_mode))
        (folder / MARK).unlink()
        old = folder
        if not exchange(folder, target):
            old = _taken_aside(target)
            try:
                move(folder, target)
            except OSError:
                move(old, target)
                raise
        with suppress(OSError):  # the outputs are in place; the next run settles what is left
            settle(old, target)
    finally:
        release(lock)


def _taken_aside(target: Path) -> Path:
    """Rename `target` to a free staging name beside it (no RENAME_EXCHANGE here)."""
    while True:
        aside = staging_path(target)
        try:
            move(target, aside)
            return aside
        except FileExistsError:
            continue


def _hold_waiting(target: Path, out_dir: Path) -> int | None:
    deadline = time.monotonic() + LOCK_WAIT_S
    while (lock := hold(target, wait=False)) is None:
        if time.monotonic() > deadline:
            raise OutputFailed(f"{out_dir}: another nsysmap is replacing its outputs")
        time.sleep(0.05)
    return lock


def remove_outputs(out_dir: Path) -> None:
    """Remove the outputs of a previous run in `out_dir`, and only those (the proven
    ones, nsysmap.output.ownership), in one step: an empty set of outputs committed.
    A manifest that is not nsysmap's is refused (OutputFailed), and nothing is removed."""
    check_replaceable(out_dir)
    if not out_dir.is_dir():
        return
    with staging(out_dir) as folder:
        commit(folder, out_dir)


def _real(out_dir: Path) -> Path:
    """The folder `out_dir` names, links followed (a link to a folder is not replaced)."""
    return Path(os.path.realpath(out_dir))


def write_failed(out_dir: Path, exc: OSError) -> OutputFailed:
    """The one-line error for an OSError while writing into `out_dir`."""
    return OutputFailed(f"{out_dir}: cannot write the outputs: {exc.strerror or exc}")
