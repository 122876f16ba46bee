"""A trace file's bytes, gunzipped as a stream and never past a limit.

A gzipped trace is inflated a megabyte at a time, so that one which would
inflate past the limit is refused as soon as it does: a 6 MB file that
inflates to 6 GB (a "gzip bomb", or a trace of 2 GB of blanks) costs the
limit, not the 6 GB. A plain file is refused by its size, before it is read.
Every gzip member is read (a file may hold several, as `cat a.gz b.gz`
writes), blank NUL padding after the last is allowed, anything else after it
is not. The caller chooses the limit (nsysmap.read.torch.torch_events: from the
memory budget) and words the refusal (`PastLimit`).
"""

from __future__ import annotations

import io
import zlib
from pathlib import Path

GZIP_MAGIC = b"\x1f\x8b"
CHUNK = 1 << 20  # compressed bytes read, and inflated bytes made, at a time


class PastLimit(Exception):
    """The file holds more than the limit once inflated."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


class Damaged(Exception):
    """A gzip stream that cannot be inflated: `reason` says why, in a few words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def inflated(path: Path, limit: int | None) -> bytes:
    """The bytes of the regular file `path`, gunzipped when gzipped; at most `limit`
    of them (None: no limit). Raises PastLimit, Damaged or OSError."""
    with path.open("rb") as stream:
        head = stream.read(len(GZIP_MAGIC))
        if head != GZIP_MAGIC:
            if limit is not None and path.stat().st_size > limit:
                raise PastLimit(limit)
            return head + stream.read()
        return _gunzipped(stream, head, limit)


def _gunzipped(stream: io.BufferedReader, head: bytes, limit: int | None) -> bytes:
    """Every gzip member of `stream` (its first bytes: `head`), inflated."""
    out = io.BytesIO()  # getvalue() hands over its buffer: the bytes are not copied
    pending, member = head, zlib.decompressobj(wbits=31)
    while True:
        if not pending:
            pending = stream.read(CHUNK)
        if not pending and member.eof:
            return out.getvalue()
        if not pending:
            raise Damaged("the file ends inside a gzip member (EOFError)")
        if member.eof:  # the next member, or padding
            pending = pending.lstrip(b"\x00")
            if not pending:
                continue
            if not pending.startswith(GZIP_MAGIC[:1]):
                raise Damaged("data after the last gzip member")
            member = zlib.decompressobj(wbits=31)
        pending = _inflate(member, pending, out, limit)


def _inflate(member: zlib._Decompress, data: bytes, out: io.BytesIO, limit: int | None) -> bytes:
    """Inflate `data` into `out`, CHUNK at most at a time; what `member` left unread
    (the start of the next member once this one ends)."""
    try:
        while not member.eof:
            made = member.decompress(data, CHUNK)
            out.write(made)
            if limit is not None and out.tell() > limit:
                raise PastLimit(limit)
            data = member.unconsumed_tail
            if not data and not made:  # all of `data` taken in: the next chunk is needed
                break
    except zlib.error as exc:
        raise Damaged(f"a corrupt gzip stream ({exc})") from None
    return member.unused_data if member.eof else b""
