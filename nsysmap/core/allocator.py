"""Memory handed back as the flow frees it: the allocators of the `nsysmap` process.

A large export is read apart (one process or time window at a time) so that
only one part's rows are held at once. With their defaults the allocators
keep much of what each part frees, and the resident memory grows from one
part to the next as if the parts were held together: at 10^6 kernels read
in 8 windows, about 0.08 GB more after each window (docs/performance.md). So
the console script (nsysmap.console) first:

* has Polars' jemalloc return freed pages within a second (`_RJEM_MALLOC_CONF` set to
  JEMALLOC_CONF while Polars is first imported, when jemalloc reads it; then
  unset again, so that the script `nsysmap run` starts does not inherit it).
  A `_RJEM_MALLOC_CONF` of the user's own is left as it is;
* fixes glibc malloc's mmap threshold at GLIBC_MMAP_THRESHOLD bytes
  (`mallopt`): a block that large is mapped on its own and unmapped when
  freed. By default the threshold rises to the size of the largest block
  freed so far, after which such blocks (numpy's arrays, for one) are
  carved from the heap and stay there once freed. This was most of the growth.

Both only shape when memory goes back to the system; no result depends on
them. The worker processes of a local Dask cluster (several reports at once,
nsysmap.many.cluster) start with the same two settings, as environment
variables.
"""

from __future__ import annotations

import ctypes
import os
import sys

JEMALLOC_ENV = "_RJEM_MALLOC_CONF"
# Freed pages go back after a second (jemalloc keeps them 10 s by default); at once
# (0 ms) cost a third more time at 10^6 kernels read whole, a second nothing measurable.
JEMALLOC_CONF = "dirty_decay_ms:1000,muzzy_decay_ms:0"
# 4 MiB: the 128 KiB of glibc's start cost 8 % more time at 10^6 kernels read whole.
GLIBC_MMAP_THRESHOLD = 4 * 1024 * 1024
GLIBC_ENV = "MALLOC_MMAP_THRESHOLD_"  # the same, as glibc reads it when a process starts
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def worker_env() -> dict[str, str]:
    """Both settings as the environment of a process nsysmap starts for its own work (a
    local Dask worker), but those the user has set: glibc reads GLIBC_ENV as the
    process starts, jemalloc JEMALLOC_ENV as Polars loads."""
    wanted = {JEMALLOC_ENV: JEMALLOC_CONF, GLIBC_ENV: str(GLIBC_MMAP_THRESHOLD)}
    return {name: value for name, value in wanted.items() if name not in os.environ}


def hand_back() -> dict[str, bool]:
    """Set both allocators as the module says; which of them took the setting."""
    return {"jemalloc": _jemalloc(), "glibc": _glibc()}


def _jemalloc() -> bool:
    """Polars imported with JEMALLOC_CONF, where it is not imported yet and the user
    has not set the variable."""
    if "polars" in sys.modules or JEMALLOC_ENV in os.environ:
        return False
    os.environ[JEMALLOC_ENV] = JEMALLOC_CONF
    try:
        import polars  # noqa: F401  (jemalloc reads its configuration as Polars loads)
    finally:
        del os.environ[JEMALLOC_ENV]
    return True


def _glibc() -> bool:
    """glibc's mmap threshold fixed, where this process runs on glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # the C library already loaded
    except OSError:
        return False
    return bool(mallopt is not None and mallopt(_M_MMAP_THRESHOLD, GLIBC_MMAP_THRESHOLD) == 1)
