"""`run_many`: attribute several reports on Dask and write one multi-rank output.

One task per report (nsysmap.many.task.attribute_one) on a Dask cluster;
the client gathers the small outcomes, numbers the ranks, and writes the
per-rank and cross-rank tables, each rank's operations (moved into the Hive
dataset) and the manifest through the one writer (nsysmap.output.writer).
A report that fails is listed with its error; the others are written all
the same.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from nsysmap.attribution.rules import BUILTIN, NameRules
from nsysmap.core.errors import ExitCode
from nsysmap.many import cluster as clusters
from nsysmap.many.collect import output_tables
from nsysmap.many.input_files import expand_inputs
from nsysmap.many.progress import Progress
from nsysmap.many.rank_ids import assign_ranks
from nsysmap.many.ranks_text import findings, terminal_summary
from nsysmap.many.same_job import ONE_JOB_DOUBTS, doubts
from nsysmap.many.task import FAILED, OK, Outcome, attribute_one
from nsysmap.many.write import WORK_DIR, RankParts, clear_previous, ranks_manifest
from nsysmap.output.placement import check_output_dir, write_failed
from nsysmap.output.writer import OUTPUT_NAMES, write_outputs

if TYPE_CHECKING:
    from distributed import Client, Future


@dataclass(frozen=True)
class ManyResult:
    """What `run_many` wrote and found."""

    out_dir: Path
    outcomes: tuple[Outcome, ...]
    tables: dict[str, pl.DataFrame]
    manifest: dict[str, Any]
    summary_text: str

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status != OK]


@dataclass(frozen=True)
class ClusterOptions:
    """Where to run: an existing scheduler, or the shape of a local cluster."""

    scheduler: str | None = None
    workers: int | None = None
    threads_per_worker: int | None = None
    memory_limit_bytes: int | None = None


def run_many(
    inputs: Sequence[str | Path],
    out_dir: str | Path,
    *,
    where: ClusterOptions | None = None,
    options: dict[str, Any] | None = None,
    rules: NameRules = BUILTIN,
    progress: bool | None = None,
    known_ranks: Sequence[int] | None = None,
) -> ManyResult:
    """Attribute every report in `inputs` (files, directories, globs) into `out_dir`.

    `known_ranks`: the rank of each input file, when the caller knows them."""
    paths = [p.resolve() for p in expand_inputs(inputs)]
    out = check_output_dir(out_dir, OUTPUT_NAMES).resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_failed(out, exc) from None
    clear_previous(out)
    where = where or ClusterOptions()
    plan = None if where.scheduler else _plan(paths, where)
    with clusters.connect(where.scheduler, plan) as client:
        described = clusters.describe(client, where.scheduler, plan)
        outcomes = _attribute_all(client, paths, out / WORK_DIR, (options or {}, rules), progress)
    known = dict(enumerate(known_ranks)) if known_ranks is not None else None
    ranks, rule = assign_ranks(outcomes, known)
    tables = output_tables(outcomes, ranks)
    manifest = ranks_manifest(
        outcomes, ranks, tables, rank_rule=rule, options=options or {}, cluster=described
    )
    manifest[ONE_JOB_DOUBTS] = doubts(outcomes, ranks, tables)
    write_outputs(tables, manifest, out, ops=RankParts(ranks), ranked=True)
    shutil.rmtree(out / WORK_DIR, ignore_errors=True)
    text = terminal_summary(findings(manifest, tables))
    return ManyResult(out, tuple(outcomes), tables, manifest, text)


def _plan(paths: list[Path], where: ClusterOptions) -> clusters.ClusterPlan:
    cpus, available = clusters.machine()
    return clusters.plan_local(
        [p.stat().st_size for p in paths],
        cpus=cpus,
        available_bytes=available,
        workers=where.workers,
        threads_per_worker=where.threads_per_worker,
        memory_limit_bytes=where.memory_limit_bytes,
    )


def _attribute_all(
    client: Client,
    paths: list[Path],
    work: Path,
    settings: tuple[dict[str, Any], NameRules],
    progress: bool | None,
) -> list[Outcome]:
    """One task per report; each outcome as it arrives, a worker's death as a failure."""
    from distributed import as_completed

    token = uuid.uuid4().hex[:8]
    keys = {f"nsysmap-attribute-{i}-{token}": p for i, p in enumerate(paths)}
    futures: dict[Future, int] = {
        client.submit(attribute_one, i, str(p), str(work), *settings, key=key, pure=False): i
        for i, (key, p) in enumerate(keys.items())
    }
    watch = _Running(client, keys)
    outcomes: list[Outcome] = []
    with Progress(len(paths), watch, enabled=progress) as shown:
        for future in as_completed(futures):
            outcome = _outcome(future, futures[future], paths)
            outcomes.append(outcome)
            shown.finished(outcome.status == OK)
            future.release()
    return sorted(outcomes, key=lambda o: o.index)


def _outcome(future: Future, index: int, paths: list[Path]) -> Outcome:
    """The task's outcome; a task that died with its worker (out of memory, crash) failed."""
    try:
        return future.result()
    except Exception as exc:  # KilledWorker, lost connection, ...
        message = f"its worker failed: {type(exc).__name__}: {exc}"
        return Outcome(index, str(paths[index]), FAILED, message, int(ExitCode.INTERNAL))


class _Running:
    """Profile name -> seconds running, from the scheduler's view of its workers."""

    def __init__(self, client: Client, keys: dict[str, Path]) -> None:
        self._client, self._keys = client, keys
        self._since: dict[str, float] = {}

    def __call__(self) -> dict[str, float]:
        now = time.monotonic()
        running = {k for keys in self._client.processing().values() for k in keys}
        for key in running:
            self._since.setdefault(key, now)
        return {self._keys[k].name: now - self._since[k] for k in running if k in self._keys}
