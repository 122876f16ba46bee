"""Synthetic GPT-2-like exports for the benchmark, generated once and cached.

`export(n_kernels, seed)` returns the path of an export made by
`devtools.synth.tile.gpt_tables` (two processes on two GPUs unless told
otherwise, about three ranges per kernel), writing it first when bench/cache/ does not hold it yet.
`user_export(scale, seed)` is the export shaped like the large one users
report (devtools.synth.user_shaped: 2.2 M kernels, 7.1 M runtime calls,
15.9 M NVTX ranges on 5 threads at scale 1). The cache key is the size (or
scale), the seed and GENERATOR_VERSION (bump it when a generator changes).
Generation time is not part of any measurement.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from devtools.synth.bulk import Frame, write_export
from devtools.synth.tile import gpt_tables
from devtools.synth.user_shaped import user_shaped_tables

CACHE = Path(__file__).parent / "cache"
GENERATOR_VERSION = 1


def export(n_kernels: int, seed: int = 0, *, processes: int = 2, log: bool = True) -> Path:
    """The cached export with about `n_kernels` kernels on `processes` processes
    (one GPU each), made when missing."""
    spread = "" if processes == 2 else f"-p{processes}"
    name = f"gpt-{n_kernels}{spread}-seed{seed}-v{GENERATOR_VERSION}.sqlite"
    return _cached(name, lambda: gpt_tables(n_kernels, seed=seed, processes=processes), log)


def user_export(scale: float, seed: int = 0, *, log: bool = True) -> Path:
    """The cached user-shaped export at `scale` (1: the reported size), made when missing."""
    name = f"user-x{scale:g}-seed{seed}-v{GENERATOR_VERSION}.sqlite"
    return _cached(name, lambda: user_shaped_tables(scale, seed=seed), log)


def _cached(
    name: str, tables: Callable[[], Mapping[str, Frame | Iterable[Frame]]], log: bool
) -> Path:
    path = CACHE / name
    if path.is_file():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    start = time.perf_counter()
    write_export(partial, tables())
    partial.rename(path)
    if log:
        size = path.stat().st_size / 1e9
        took = time.perf_counter() - start
        print(f"generated {path.name} ({size:.2f} GB) in {took:.0f} s", flush=True)
    return path
