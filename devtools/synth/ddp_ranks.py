"""One export per rank of a synchronous data-parallel GPT-2 job, with a slow rank and layer.

`write_rank_exports(directory, job, n_kernels)` writes `rank00.sqlite`,
`rank01.sqlite`, ... (one process on one GPU each, its rank in the launch
environment as `RANK=N`, as `torchrun ... nsys profile python train.py`
records it). Every rank runs the same steps with the same costs, except the
slow rank: its kernels take `rank_factor` times longer, and those launched
inside `slow_module` (forward and backward) `module_factor` times longer on
top. The job is synchronous: each NCCL all-reduce ends on every rank when it
ends on the slow rank, so the other ranks' all-reduce kernels last longer by
the time they wait for it (the straggler cost). As in DDP, an all-reduce
starts once the compute stream has produced its gradients, a last one
follows the whole backward pass, and the optimizer starts once it has ended.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from devtools.synth import gpt
from devtools.synth.bulk import Frame, write_export
from devtools.synth.gpt2_model import Mod, Op
from devtools.synth.tile import gpt_tables


@dataclass(frozen=True)
class Job:
    """The ranks of one job and what makes one of them slow."""

    world: int
    slow_rank: int | None = None
    rank_factor: float = 1.0  # every compute kernel of the slow rank
    slow_module: str | None = None  # e.g. "transformer.h.5": its kernels on the slow rank
    module_factor: float = 1.0
    n_layer: int = 12
    seed: int = 0


class RankTracer(gpt.Tracer):
    """The step tracer, with slower kernels and all-reduces that end at given times."""

    def __init__(
        self,
        rnd: random.Random,
        *,
        factor: float = 1.0,
        module: str | None = None,
        module_factor: float = 1.0,
        nccl_ends: list[int] | None = None,
    ) -> None:
        super().__init__(rnd)
        self.factor, self.module, self.module_factor = factor, module, module_factor
        self.nccl_ends = nccl_ends or []
        self.inside = 0
        self.nccl_done: list[int] = []  # end of each all-reduce kernel, in order

    @contextmanager
    def _within(self, item: Mod | Op, prefix: str) -> Iterator[None]:
        hit = isinstance(item, Mod) and gpt._path(prefix, item.name) == self.module
        self.inside += hit
        try:
            yield
        finally:
            self.inside -= hit

    def forward(self, item: Mod | Op, prefix: str, seqs: dict[int, int]) -> None:
        with self._within(item, prefix):
            super().forward(item, prefix, seqs)

    def backward(self, item: Mod | Op, prefix: str, seqs: dict[int, int]) -> None:
        with self._within(item, prefix):
            super().backward(item, prefix, seqs)
        if isinstance(item, Mod) and not prefix and not item.name:
            self.all_reduce()  # the last gradient bucket, once the whole backward is done

    def call(self, thread: int, api: str, gpu: dict | None = None) -> None:
        key = None if gpu is None else gpu.get("kernel")
        free = self.stream_free
        if key == "nccl":  # the all-reduce waits for the gradients (a stream wait event)
            free[gpt.NCCL_STREAM] = max(free[gpt.NCCL_STREAM], free[gpt.COMPUTE_STREAM])
        elif key == "adam":  # the optimizer waits for the all-reduced gradients
            free[gpt.COMPUTE_STREAM] = max(free[gpt.COMPUTE_STREAM], free[gpt.NCCL_STREAM])
        if gpu is not None and gpu["kind"] == "kernel" and key != "nccl":
            scale = self.factor * (self.module_factor if self.inside else 1.0)
            gpu = {**gpu, "dur": gpu["dur"] * scale}
        super().call(thread, api, gpu)
        nccl = key == "nccl"
        if nccl:
            row, k = self.out.gpu[-1], len(self.nccl_done)
            if k < len(self.nccl_ends) and self.nccl_ends[k] > row["end"]:
                row["end"] = self.stream_free[gpt.NCCL_STREAM] = self.nccl_ends[k]
            self.nccl_done.append(row["end"])


def _rank_template(job: Job, slow: bool) -> Callable[[int, random.Random], gpt.Template]:
    """The step template factory of a slow or a regular rank of `job`."""

    def template(n_layer: int, rnd: random.Random) -> gpt.Template:
        state = rnd.getstate()
        slow_tr = RankTracer(
            _same(state),
            factor=job.rank_factor,
            module=job.slow_module,
            module_factor=job.module_factor,
        )
        reference = gpt.step_template(n_layer, rnd, slow_tr)
        if slow:
            return reference
        tr = RankTracer(_same(state), nccl_ends=slow_tr.nccl_done)
        own = gpt.step_template(n_layer, rnd, tr)
        own.period_ns = max(own.period_ns, reference.period_ns)
        return own

    return template


def _same(state: tuple[Any, ...]) -> random.Random:
    rnd = random.Random()
    rnd.setstate(state)
    return rnd


def rank_tables(job: Job, rank: int, n_kernels: int) -> dict[str, Frame | Iterator[pl.DataFrame]]:
    """The tables of rank `rank`'s export (one process, about `n_kernels` kernels)."""
    slow = job.slow_rank is not None and rank == job.slow_rank
    tables = gpt_tables(
        n_kernels,
        seed=job.seed,
        n_layer=job.n_layer,
        processes=1,
        template=_rank_template(job, slow),
    )
    env = {"RANK": rank, "LOCAL_RANK": rank % 8, "WORLD_SIZE": job.world}
    tables["META_DATA_CAPTURE"] = _capture_env(env)
    return tables


def _capture_env(env: dict[str, int]) -> pl.DataFrame:
    """The launch environment as nsys records it in META_DATA_CAPTURE."""
    values = [f'{key}="{value}"' for key, value in env.items()]
    return pl.DataFrame({"name": ["PROCESS_0:ENVIRONMENT_VARIABLE"] * len(values), "value": values})


def rank_file(directory: Path, rank: int) -> Path:
    """The file name of rank `rank` (zero-padded so that names sort by rank)."""
    return Path(directory) / f"rank{rank:02d}.sqlite"


def write_rank_exports(directory: str | Path, job: Job, n_kernels: int) -> list[Path]:
    """Write one export per rank into `directory`; returns their paths in rank order."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return [write_rank(directory, job, rank, n_kernels) for rank in range(job.world)]


def write_rank(directory: Path, job: Job, rank: int, n_kernels: int) -> Path:
    """Write rank `rank`'s export into `directory` (made when missing)."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    return write_export(rank_file(directory, rank), rank_tables(job, rank, n_kernels))
