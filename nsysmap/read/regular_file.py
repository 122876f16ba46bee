"""The one check every input file passes before a reader opens it.

Only regular files are read: a named pipe (FIFO) would block the first read
forever, and a device or socket is never a profile. Each refusal is an
InputNotFound (exit 3) with a one-line message that starts with the path.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from nsysmap.core.errors import InputNotFound

_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def regular_file(path: str | os.PathLike[str], what: str) -> Path:
    """`path` as a Path once it is a readable regular file; `what` names the expected input."""
    file = Path(path)
    try:
        mode = file.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise InputNotFound(f"{file}: no such file") from None
    except OSError as exc:
        raise InputNotFound(f"{file}: cannot read it ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise InputNotFound(f"{file}: is a directory, not {what}")
    if not stat.S_ISREG(mode):
        kind = next(
            (name for test, name in _KINDS if test(mode)), "something other than a regular file"
        )
        raise InputNotFound(f"{file}: is {kind}, not {what}; give a regular file")
    if not os.access(file, os.R_OK):
        raise InputNotFound(f"{file}: cannot read it (Permission denied)")
    return file
