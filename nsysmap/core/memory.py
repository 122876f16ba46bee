"""The memory budget of a run: how much an input may take to read and attribute.

`--memory-gb` sets it. By default:

* how an nsys export is read (whole, one process or one time window at a
  time, nsysmap.sources.choose; `split_budget_bytes`) aims at LAPTOP_BYTES, or at
  the share below where that is less: a large export is then read in parts
  that a laptop holds, whatever the machine it runs on, at some cost in time
  (docs/performance.md);
* how large a torch.profiler trace may be (nsysmap.read.torch.torch_events;
  `budget_bytes`), which cannot be read in parts and is refused past its
  budget, is AVAILABLE_SHARE of what this process may still use.

What this process may still use: the memory the system has available
(Linux's MemAvailable) and, under an address-space limit (`ulimit -v`,
RLIMIT_AS), what is left of that limit.
"""

from __future__ import annotations

import resource
from pathlib import Path

AVAILABLE_SHARE = 0.8
# The default budget of an nsys export's read: the memory of a laptop, 6 GB.
LAPTOP_BYTES = 6e9


def budget_bytes(memory_gb: float | None) -> float | None:
    """`memory_gb` in bytes, or (None) the default budget; None when none is known."""
    return memory_gb * 1e9 if memory_gb is not None else available_bytes()


def split_budget_bytes(memory_gb: float | None) -> float:
    """`memory_gb` in bytes, or (None) the default budget of reading an nsys export:
    LAPTOP_BYTES, or AVAILABLE_SHARE of what this process may still use where that
    is less."""
    if memory_gb is not None:
        return memory_gb * 1e9
    available = available_bytes()
    return LAPTOP_BYTES if available is None else min(LAPTOP_BYTES, available)


def available_bytes() -> float | None:
    """AVAILABLE_SHARE of the memory this process may still use (see the module
    doc), else None when neither the system nor a limit says."""
    limits = [v for v in (_system_available(), _address_space_left()) if v is not None]
    return AVAILABLE_SHARE * min(limits) if limits else None


def _system_available() -> int | None:
    """The memory available now (Linux's MemAvailable), in bytes."""
    value = _field(Path("/proc/meminfo"), "MemAvailable")
    return None if value is None else value * 1024


def _address_space_left() -> int | None:
    """What is left of the address-space limit (RLIMIT_AS) past this process's
    virtual size; None without a limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    size = _field(Path("/proc/self/status"), "VmSize")
    return max(0, soft - (size or 0) * 1024)


def _field(path: Path, name: str) -> int | None:
    """The number of kB of `name` in a /proc file of `name: N kB` lines."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition(":")
        if key == name and value.split() and value.split()[0].isdigit():
            return int(value.split()[0])
    return None
