"""The work done for one report on a Dask worker: its ranks through the one flow.

`attribute_one` drives the one flow (nsysmap.flow.run_stages) with the report's
sources (`rank_sources`): each process with GPU operations of an nsys
export read and attributed on its own (nsysmap.sources.by_process), else the whole
report. A flow's OPS rows are held, or streamed into the work directory
past STREAM_OPS; `rank_units` then gives each process its rank's `Unit`,
with its operations in its own Parquet part and its summary and waits
tables (the flow's) in the returned `Outcome`. Nothing is written as one
report's output and read back. Ranks are numbered later, on the client,
once every report has said what it knows (nsysmap.many.rank_ids).

It never raises for a bad report: the failure comes back in the `Outcome`
(message and exit code), so that one corrupt file costs only its own result.
Nothing here imports Dask; the function runs as well in a plain process.
"""

from __future__ import annotations

import os
import resource
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap.attribution.rules import BUILTIN, NameRules
from nsysmap.core import schemas
from nsysmap.core.errors import ExitCode, NsysmapError
from nsysmap.core.profile import NestedProfile
from nsysmap.flow.analysis import Analysis
from nsysmap.flow.run_stages import Settings, flow, process_summary
from nsysmap.many.measured import MEASURED, module_queries, module_tables
from nsysmap.many.rank_overlap import COMMUNICATION, exposed_communication
from nsysmap.output.ops_sinks import OpsFile, OpsSink, sink_for
from nsysmap.output.writer import input_identity
from nsysmap.sources.by_process import merged_meta
from nsysmap.sources.choose import rank_sources
from nsysmap.sources.input_kinds import kind_of

OK, FAILED = "ok", "failed"
UNIT_KEY = "pid"  # the column that says which unit a row of a unit table belongs to
# Per unit and step: its operations, their time and communication, their extent.
UNIT_STEPS = pl.Schema(
    {
        UNIT_KEY: pl.Int64,
        "step": pl.Int64,
        "ops": pl.Int64,
        "time_ns": pl.Int64,
        "comm_ns": pl.Int64,
        "first_start_ns": pl.Int64,
        "last_end_ns": pl.Int64,
    }
)


@dataclass(frozen=True)
class Unit:
    """One process with GPU operations in a report: one rank."""

    pid: int
    devices: tuple[int, ...]
    ops: int
    time_ns: int
    part: str  # its operations, as a Parquet file in the work directory


@dataclass(frozen=True)
class Outcome:
    """What attributing one report gave (small: summaries, not operations)."""

    index: int
    path: str
    status: str
    error: str | None = None
    exit_code: int | None = None
    units: tuple[Unit, ...] = ()
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)  # each with a pid column
    meta: dict[str, Any] = field(default_factory=dict)  # the report's meta facts
    source: dict[str, Any] = field(default_factory=dict)  # path, size_bytes, sha256
    device_names: dict[int, str] = field(default_factory=dict)  # device id -> GPU model
    seconds: float = 0.0
    worker: str = ""
    worker_peak_rss_bytes: int = 0


def attribute_one(
    index: int, path: str, work_dir: str, options: dict[str, Any], rules: NameRules = BUILTIN
) -> Outcome:
    """Attribute report `path` (input number `index`) into `work_dir`/<index>/."""
    start = time.perf_counter()
    worker = f"{socket.gethostname()}:{os.getpid()}"
    common = partial(Outcome, index=index, path=path, worker=worker)
    try:
        target = Path(work_dir) / f"{index:06d}"
        # Several reports at once are not inferred (docs/inference.md, Limits).
        settings = Settings(rules, infer=False, options=options, release=True, structure=False)
        outcome = common(status=OK, **_attributed(Path(path), target, settings))
    except NsysmapError as exc:
        outcome = common(status=FAILED, error=str(exc), exit_code=int(exc.exit_code))
    except Exception as exc:  # one report's bug must not lose the others
        message = f"internal error: {type(exc).__name__}: {exc}"
        outcome = common(status=FAILED, error=message, exit_code=ExitCode.INTERNAL)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return _finished(outcome, time.perf_counter() - start, peak)


def _attributed(path: Path, target: Path, settings: Settings) -> dict[str, Any]:
    """The Outcome's fields of report `path`: each source of `rank_sources` through
    the one flow, its ranks' parts in `target`; the input's SHA-256 meanwhile."""
    kind = kind_of(path)  # the one check of the path, before the hash reads it
    stop = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        hashed = pool.submit(input_identity, path, stop)
        try:
            units: list[Unit] = []
            tables: list[dict[str, pl.DataFrame]] = []
            metas: list[pl.DataFrame] = []
            devices: dict[int, str] = {}
            for source in rank_sources(path, kind, settings.stages):
                analysis = flow(source, partial(_sink, target), settings)
                found, made = rank_units(analysis, target)
                if isinstance(analysis.store, OpsFile):
                    analysis.store.path.unlink()  # its ranks' parts are written
                units += found
                tables.append(made)
                metas.append(analysis.profile.meta)
                devices |= _device_names(analysis.manifest.get("devices") or [])
        except BaseException:
            stop.set()  # do not make a failure wait for the hash
            raise
        source_identity = hashed.result()
    meta = metas[0] if len(metas) == 1 else merged_meta(metas, len(metas))
    return {
        "units": tuple(units),
        "tables": {name: pl.concat([t[name] for t in tables]) for name in tables[0]},
        "meta": dict(zip(meta["key"], meta["value"], strict=True)),
        "source": source_identity,
        "device_names": devices,
    }


def _sink(target: Path, profile: NestedProfile) -> OpsSink:
    """The OPS rows held, or above STREAM_OPS streamed into the work directory."""
    return sink_for(profile.ops.height, lambda: target / f"ops-{uuid.uuid4().hex[:8]}.parquet")


def _device_names(devices: list[Any]) -> dict[int, str]:
    """Device id -> name, of the devices the report names (from its manifest)."""
    return {
        d["device_id"]: d["name"]
        for d in devices
        if isinstance(d, dict) and isinstance(d.get("device_id"), int) and d.get("name")
    }


def _finished(outcome: Outcome, seconds: float, peak: int) -> Outcome:
    return replace(outcome, seconds=seconds, worker_peak_rss_bytes=peak)


def rank_units(
    analysis: Analysis, target: Path
) -> tuple[tuple[Unit, ...], dict[str, pl.DataFrame]]:
    """The ranks of one flow: one unit per process with GPU operations, its operations
    written to its own part in `target`, and the units' tables (each with a pid).

    A flow of one process (`rank_sources`) is one unit with the flow's own
    summaries. Only a flow over several processes (a report whose kind is
    not read by process: a torch.profiler trace, an export whose tables do
    not say every row's process) is parted here, each part's summaries the
    flow's `process_summary`."""
    ops = analysis.store.scan()
    target.mkdir(parents=True, exist_ok=True)
    found = (
        ops.group_by("pid")
        .agg(
            pl.col("device_id").unique().sort().alias("devices"),
            pl.len().alias("ops"),
            pl.col("dur_ns").sum().alias("time_ns"),
        )
        .with_columns(pl.col("devices").list.first().alias("first_device"))
        .sort("first_device", "pid", nulls_last=True)
        .collect()
    )
    units, summaries = [], []
    for row in found.iter_rows(named=True):
        # The partition directory (rank=N) gives the rank: the file holds no rank column.
        part = target / f"ops-pid{row['pid']}.parquet"
        mine = ops.filter(pl.col("pid") == row["pid"])
        mine.drop("rank").sink_parquet(part)
        summary = analysis.summaries if found.height == 1 else process_summary(analysis, row["pid"])
        devices = tuple(int(d) for d in row["devices"])
        units.append(Unit(row["pid"], devices, row["ops"], row["time_ns"], str(part)))
        summaries.append(_with_pid(summary.tables(), row["pid"]))
    tables = {name: pl.concat([s[name] for s in summaries]) for name in summaries[0]}
    tables.update(unit_tables(ops))
    tables.update(by_device_owner(analysis.summaries.waits, units))
    return tuple(units), tables


def _with_pid(tables: dict[str, pl.DataFrame], pid: int) -> dict[str, pl.DataFrame]:
    return {
        name: frame.select(pl.lit(pid, pl.Int64).alias(UNIT_KEY), pl.all())
        for name, frame in tables.items()
    }


def by_device_owner(
    tables: dict[str, pl.DataFrame], units: Sequence[Unit]
) -> dict[str, pl.DataFrame]:
    """Tables kept per device (the waits: idle, stream_idle, launch_cost), each row
    given the pid of the unit whose GPU it is.

    The waits of a device are those of its operations alone, so where every
    process has GPUs of its own, a unit's rows are its waits as a report of
    that process alone would give them. A GPU that several processes share
    (rare: MPS) goes to the first of them, in unit (rank) order.
    """
    owners: dict[int, int] = {}
    for unit in units:
        for device in unit.devices:
            owners.setdefault(device, unit.pid)
    owner = pl.DataFrame(
        {"device_id": list(owners), UNIT_KEY: list(owners.values())},
        schema={"device_id": pl.Int64, UNIT_KEY: pl.Int64},
    )
    return {
        name: frame.join(owner, on="device_id", how="inner", maintain_order="left").select(
            UNIT_KEY, pl.exclude(UNIT_KEY)
        )
        for name, frame in tables.items()
    }


def unit_tables(ops: pl.LazyFrame) -> dict[str, pl.DataFrame]:
    """What the cross-rank tables read of each process, over its measured operations
    (warm-up left out: nsysmap.many.measured): per step, time and communication; its
    by_module and by_module_phase; the overlap of its communication."""
    measured = ops.filter(MEASURED)
    comm = pl.col("dur_ns").filter(pl.col("category") == COMMUNICATION).sum()
    queries = {
        "steps": measured.group_by("pid", "step").agg(
            pl.len().cast(pl.Int64).alias("ops"),
            pl.col("dur_ns").sum().alias("time_ns"),
            comm.alias("comm_ns"),
            pl.col("start_ns").min().alias("first_start_ns"),
            pl.col("end_ns").max().alias("last_end_ns"),
        ),
        **module_queries(measured),
    }
    done = dict(zip(queries, pl.collect_all(list(queries.values())), strict=True))
    steps = done.pop("steps").sort("pid", "step", nulls_last=True)
    steps = schemas.conform(steps, UNIT_STEPS, "steps")
    return {"steps": steps, "exposed_comm": exposed_communication(ops), **module_tables(done)}
