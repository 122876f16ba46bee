"""Synthetic GPT-2-like exports for the benchmark, generated once and cached.

`export(n_kernels, seed)` returns the path of an export made by
`nsysmap.synth.tile.gpt_tables` (two processes on two GPUs unless told
otherwise, about three ranges per kernel), writing it first when bench/cache/ does not hold it yet.
The cache key is the size, the seed and GENERATOR_VERSION (bump it when the
generator changes). Generation time is not part of any measurement.
"""

from __future__ import annotations

import time
from pathlib import Path

from nsysmap.synth.bulk import write_export
from nsysmap.synth.tile import gpt_tables

CACHE = Path(__file__).parent / "cache"
GENERATOR_VERSION = 1


def export(n_kernels: int, seed: int = 0, *, processes: int = 2, log: bool = True) -> Path:
    """The cached export with about `n_kernels` kernels on `processes` processes
    (one GPU each), made when missing."""
    spread = "" if processes == 2 else f"-p{processes}"
    path = CACHE / f"gpt-{n_kernels}{spread}-seed{seed}-v{GENERATOR_VERSION}.sqlite"
    if path.is_file():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    start = time.perf_counter()
    write_export(partial, gpt_tables(n_kernels, seed=seed, processes=processes))
    partial.rename(path)
    if log:
        size = path.stat().st_size / 1e9
        took = time.perf_counter() - start
        print(f"generated {path.name} ({size:.2f} GB) in {took:.0f} s", flush=True)
    return path
