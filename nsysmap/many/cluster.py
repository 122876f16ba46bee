"""Where the reports are attributed: a Dask cluster, local by default.

`plan_local` sizes a `LocalCluster` to the machine: as many reports at once
as there are cores, fewer when their estimated memory would not fit (each
report needs about MEMORY_PER_INPUT_BYTE times its file size, plus a fixed
BASE_TASK_BYTES; see docs/performance.md). Each worker is a process with one
thread and its share of the cores for Polars. `connect` yields a client on
that cluster, or on an existing scheduler (`--scheduler ADDRESS`), where
workers must see the same paths as this machine.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nsysmap.core import allocator
from nsysmap.core.allocator import GLIBC_ENV
from nsysmap.core.errors import ClusterFailed

if TYPE_CHECKING:
    from distributed import Client

# Peak memory of attributing one report, from the benchmarks (docs/performance.md):
# about 2.7 times the export's size at 10^7 kernels; 0.55 to 0.59 GB for a 40 MB
# export of 10^5 kernels in a Dask worker, most of it the worker process itself.
MEMORY_PER_INPUT_BYTE = 3
BASE_TASK_BYTES = 512 << 20
USABLE_MEMORY = 0.8  # of the memory available now; the rest stays for the machine


@dataclass(frozen=True)
class ClusterPlan:
    """A local cluster's shape, and why."""

    workers: int
    threads_per_worker: int
    memory_limit_bytes: int  # per worker
    polars_threads: int  # per worker process
    reason: str


def task_bytes(size_bytes: int) -> int:
    """Estimated peak memory of attributing a report of `size_bytes`."""
    return MEMORY_PER_INPUT_BYTE * size_bytes + BASE_TASK_BYTES


def plan_local(
    sizes: Sequence[int],
    *,
    cpus: int,
    available_bytes: int,
    workers: int | None = None,
    threads_per_worker: int | None = None,
    memory_limit_bytes: int | None = None,
) -> ClusterPlan:
    """Workers x threads for `sizes` (input file sizes) on a machine of `cpus` and memory."""
    usable = int(available_bytes * USABLE_MEMORY)
    need = task_bytes(max(sizes, default=0))
    fits = max(1, usable // need)
    threads = threads_per_worker or 1
    if workers is None:
        slots = max(1, min(cpus, len(sizes) or 1, fits))
        workers = max(1, slots // threads)
        reason = (
            f"{slots} report(s) at once: {cpus} core(s), {len(sizes)} report(s), "
            f"{fits} fit(s) in {usable / 2**30:.1f} GiB at {need / 2**30:.2f} GiB each"
        )
    else:
        reason = "workers as given"
    limit = memory_limit_bytes or max(need * threads, usable // workers)
    polars_threads = max(1, cpus // workers)
    return ClusterPlan(workers, threads, limit, polars_threads, reason)


def machine() -> tuple[int, int]:
    """(cores, bytes of memory available now) of this machine."""
    import psutil  # installed with distributed

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cpus or 1, psutil.virtual_memory().available


@contextmanager
def connect(scheduler: str | None, plan: ClusterPlan | None) -> Iterator[Client]:
    """A Dask client: on `scheduler` when given, else on a local cluster shaped by `plan`.

    A cluster that cannot be started or reached is a ClusterFailed (one line).
    """
    with ExitStack() as stack:
        try:
            client = stack.enter_context(_open(scheduler, plan))
        except (OSError, RuntimeError, TimeoutError, ValueError) as exc:
            where = scheduler or "a local Dask cluster"
            raise ClusterFailed(f"{where}: could not start or reach it: {exc}") from exc
        yield client


@contextmanager
def _open(scheduler: str | None, plan: ClusterPlan | None) -> Iterator[Client]:
    import dask
    from distributed import Client, LocalCluster

    if scheduler is not None:
        with Client(scheduler, timeout=30) as client:
            yield client
        return
    if plan is None:
        raise ValueError("a local cluster needs a plan (plan_local)")
    # Each worker starts with the console script's allocator settings
    # (nsysmap.core.allocator): glibc's before the process starts, jemalloc's before
    # Polars loads; a worker restarted after a memory limit starts with them too.
    settings = allocator.worker_env()
    glibc = {k: v for k, v in settings.items() if k == GLIBC_ENV}  # set before the process starts
    with dask.config.set({f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in glibc.items()}):
        cluster = LocalCluster(
            n_workers=plan.workers,
            threads_per_worker=plan.threads_per_worker,
            memory_limit=plan.memory_limit_bytes,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.CRITICAL,
            env={"POLARS_MAX_THREADS": str(plan.polars_threads), **settings},
        )
    with cluster, Client(cluster) as client:
        yield client


def describe(client: Client, scheduler: str | None, plan: ClusterPlan | None) -> dict[str, Any]:
    """The cluster as the manifest records it."""
    workers = client.scheduler_info(n_workers=-1).get("workers", {})
    threads = sorted({w.get("nthreads") for w in workers.values()})
    out = {
        "scheduler": scheduler or "local",
        "workers": len(workers),
        "threads_per_worker": threads[0] if len(threads) == 1 else threads,
    }
    if plan is not None:
        out |= {
            "memory_limit_bytes": plan.memory_limit_bytes,
            "polars_threads": plan.polars_threads,
            "sized_by": plan.reason,
        }
    return out
