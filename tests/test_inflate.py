"""Gzipped traces inflated as a stream, within the memory budget (nsysmap.read.torch.inflate).

A trace that would inflate past what the budget reads is refused with one line
and exit 14 as soon as it does, having held about the limit, never the whole:
the 6 MB file that inflated to 6 GB used to end in "internal error:
MemoryError". The bombs of gigabytes run in tests/test_oversized.py (slow).
"""

from __future__ import annotations

import gzip
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from nsysmap.core.errors import ExitCode, InputTooLarge, NotAProfile
from nsysmap.read.torch.inflate import CHUNK, Damaged, PastLimit, inflated
from nsysmap.read.torch.torch_events import TRACE_BYTES_PER_BYTE, decompressed
from tests.cli_runner import invoke

DATA = b'{"traceEvents": [' + b" " * 3_000_000 + b"]}"


def gzip_bomb(path: Path, blank_bytes: int, block: int = 1 << 24) -> Path:
    """A gzipped trace of `blank_bytes` blanks between `{"traceEvents": [` and `]}`:
    one member of `block` blanks written again and again (gzip allows many members),
    so that gigabytes take a few megabytes and well under a second to make."""
    member = gzip.compress(b" " * block, compresslevel=9, mtime=0)
    with path.open("wb") as out:
        out.write(gzip.compress(b'{"traceEvents": [', mtime=0))
        for _ in range(blank_bytes // block):
            out.write(member)
        out.write(gzip.compress(b"]}", mtime=0))
    return path


@pytest.mark.parametrize(
    "content",
    [
        gzip.compress(DATA),
        gzip.compress(DATA[:1000]) + gzip.compress(DATA[1000:]),  # two members
        gzip.compress(b"") + gzip.compress(DATA) + b"\x00" * 16,  # an empty one, padding
        DATA,  # not gzipped
    ],
    ids=["one member", "two members", "padded", "plain"],
)
def test_inflated_whole(tmp_path, content):
    path = tmp_path / "t.json.gz"
    path.write_bytes(content)
    assert inflated(path, None) == DATA
    assert inflated(path, len(DATA)) == DATA
    with pytest.raises(PastLimit):
        inflated(path, len(DATA) - 1)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (gzip.compress(DATA)[:-20], "ends inside a gzip member"),
        (gzip.compress(DATA) + b"junk", "data after the last gzip member"),
        (gzip.compress(DATA)[:40] + b"\xff" * 64 + gzip.compress(DATA)[104:], "corrupt"),
    ],
    ids=["truncated", "trailing junk", "bit flips"],
)
def test_damaged_streams(tmp_path, content, reason):
    path = tmp_path / "t.json.gz"
    path.write_bytes(content)
    with pytest.raises(Damaged, match=reason):
        inflated(path, None)
    with pytest.raises(NotAProfile) as info:
        decompressed(path)
    assert info.value.exit_code == ExitCode.UNUSABLE_INPUT and "\n" not in str(info.value)


def test_a_bomb_costs_the_limit_not_what_it_inflates_to(tmp_path):
    """64 MB of blanks in 70 kB: refused having held at most the limit and a chunk."""
    path = gzip_bomb(tmp_path / "bomb.json.gz", 64 << 20)
    limit = 4 << 20
    tracemalloc.start()
    try:
        with pytest.raises(PastLimit):
            inflated(path, limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < limit + 3 * CHUNK, peak


def test_the_budget_sets_the_limit(tmp_path):
    """A budget of 7 MB reads 1 MB of trace (7 bytes of memory per byte); the message
    says how to raise it."""
    path = gzip_bomb(tmp_path / "bomb.json.gz", 2 << 20, block=1 << 20)
    budget_gb = TRACE_BYTES_PER_BYTE * 1e6 / 1e9
    with pytest.raises(InputTooLarge) as info:
        decompressed(path, budget_gb)
    assert info.value.exit_code == ExitCode.TOO_LARGE == 14
    assert "more than 0.00 GB of trace" in str(info.value) and "--memory-gb" in str(info.value)
    assert len(decompressed(path, 3 * budget_gb)) == (2 << 20) + len('{"traceEvents": []}')


def test_a_plain_trace_past_the_limit_is_refused_by_its_size(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(DATA)
    with pytest.raises(InputTooLarge):
        decompressed(path, TRACE_BYTES_PER_BYTE * 1e6 / 1e9)


def test_the_cli_says_it_in_one_line_with_exit_14(tmp_path):
    path = gzip_bomb(tmp_path / "bomb.json.gz", 8 << 20, block=1 << 20)
    code, _, err = invoke(["attribute", path, "-o", tmp_path / "out", "--memory-gb", "0.01"])
    assert code == 14
    assert err.count("\n") == 1 and err.startswith("nsysmap: error: ") and "--memory-gb" in err
    assert not (tmp_path / "out").exists()


def test_an_address_space_limit_bounds_the_budget():
    """Under `ulimit -v`, what is left of the limit, not the machine's free memory."""
    code = (
        "import resource; from nsysmap.core.memory import available_bytes;"
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30));"
        "print(available_bytes())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 0 < float(out.stdout) <= 0.8 * (2 << 30)
