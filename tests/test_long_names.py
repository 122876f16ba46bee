"""Kernel names of tens of megabytes cost memory once, not once per operation.

An export may name many operations with one long name (StringIds holds it
once). Every step of the flow that groups, sorts or writes by a name works on
codes (nsysmap.core.coded, nsysmap.output.text_parquet), so the peak is bounded by
what the profile holds. Each run is a child process under `ulimit -v 8000000`
(tests/capped.py) whose peak resident memory comes from wait4. Before, two
50 MB names over 146 operations took 9.15 GB without the cap and died by
SIGABRT under it (a 4.3 GB allocation): every row copied its name.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from devtools.synth import SynthExport
from tests.capped import run_capped

pytestmark = pytest.mark.slow  # names of 10 and 50 MB through the whole flow, child processes

MAIN = 11


def names_export(path: Path, megabytes: float, kernels: int) -> Path:
    """`kernels` kernels named by two names of `megabytes` MB each (alternately), a copy
    and a fill, each launched inside a forward phase."""
    b = SynthExport()
    b.thread(10, MAIN, "python")
    b.range(10, MAIN, 0, 10 * kernels + 100, "nsysmap:phase:forward")
    for i in range(kernels):
        b.launch(10, MAIN, 2 + i * 5, 2.5 + i * 5, corr=i + 1)
        b.kernel(10, 0, 7, 3 + i * 5, 4 + i * 5, corr=i + 1, name=f"k{i % 2}")
    end = 5 * kernels + 10
    b.launch(10, MAIN, end, end + 0.5, corr=kernels + 1, api="cudaMemcpyAsync_v3020")
    b.memcpy(10, 0, 7, end + 1, end + 2, corr=kernels + 1)
    b.launch(10, MAIN, end + 3, end + 3.5, corr=kernels + 2, api="cudaMemsetAsync_v3020")
    b.memset(10, 0, 7, end + 4, end + 5, corr=kernels + 2)
    b.write(path)
    size = int(megabytes * 10**6)
    with sqlite3.connect(path) as db:  # the two names, long: every name column points there
        for short in ("k0", "k1"):
            text = f"void {short}_" + short[-1] * size + "<float>(int)"
            db.execute("UPDATE StringIds SET value = ? WHERE value = ?", (text, short))
    db.close()
    return path


def _ran(path: Path, out: Path) -> tuple[float, pl.DataFrame]:
    done = run_capped(["attribute", str(path), "-o", str(out), "--quiet"])
    assert done.code == 0, done.stderr[-2000:]
    return done.peak_rss_mb, pl.read_parquet(out / "ops.parquet")


def test_two_kernel_names_of_50_mb(tmp_path):
    """146 operations, names of 50 MB: 7.3 GB if every row held its own copy."""
    path = names_export(tmp_path / "names.sqlite", 50, 144)
    peak, ops = _ran(path, tmp_path / "out")
    assert ops.height == 146
    lengths = ops.filter(pl.col("kind") == "kernel")["name"].str.len_bytes().unique().to_list()
    assert sorted(lengths) == [len("void k0_<float>(int)") + 50 * 10**6]
    by_kernel = pl.read_parquet(tmp_path / "out" / "by_kernel.parquet")
    assert by_kernel.filter(pl.col("ops") == 72).height == 2
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["tables"]
    assert peak < 2500, peak  # measured 1,151 MB (docs/cli.md)


def test_a_name_costs_memory_once_not_per_row(tmp_path):
    """Eight times the rows named by the same two 10 MB names: the peak barely moves
    (a copy per row would add 2 x 10 MB x 252 kernels = 5 GB)."""
    few = _ran(names_export(tmp_path / "few.sqlite", 10, 36), tmp_path / "few")[0]
    many = _ran(names_export(tmp_path / "many.sqlite", 10, 288), tmp_path / "many")[0]
    assert many - few < 300, (few, many)
