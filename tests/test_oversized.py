"""Gzipped traces that inflate to gigabytes, under an address-space cap (`ulimit -v
8000000`): one line and exit 14, having held about the limit.

Each bomb is made in the test (nothing large is committed; gzip members of
blanks written again and again) and each run is a child process with
RLIMIT_AS set before it starts (tests/capped.py), its peak resident memory
read from wait4. A 6 MB `.json.gz` of 6 GB of blanks used to end in
"internal error: MemoryError" at 6.2 GB resident.
"""

from __future__ import annotations

import pytest

from tests.capped import run_capped
from tests.test_inflate import gzip_bomb

pytestmark = pytest.mark.slow  # gigabytes inflated in child processes


def test_a_gzip_bomb_of_6_gb(tmp_path):
    bomb = gzip_bomb(tmp_path / "bomb.json.gz", 6 * 10**9)
    assert bomb.stat().st_size < 10 * 10**6
    done = run_capped(["attribute", str(bomb), "-o", str(tmp_path / "out"), "--quiet"])
    assert done.code == 14, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--memory-gb" in lines[0], done.stderr[-2000:]
    assert done.peak_rss_mb < 2500  # the limit (at most 0.8 x 8 GB / 7) and the program
    assert not (tmp_path / "out").exists()


def test_2_gb_of_blanks(tmp_path):
    """Within 8 GB of address space the budget reads under 1 GB of trace: refused."""
    bomb = gzip_bomb(tmp_path / "blanks.json.gz", 2 * 10**9)
    done = run_capped(["attribute", str(bomb), "-o", str(tmp_path / "out"), "--quiet"])
    assert done.code == 14, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1
