"""The one flow: a source's profiles -> attribute -> summarise -> infer -> a checked Analysis.

`flow` is the only place the stages are called in order. Every way in
drives it: `nsysmap.analyse` (one profile in memory), `nsysmap attribute`
(`analyse_file`: a file, whole or one process at a time), `nsysmap run`
(the file it captured, the same way) and several reports (each report's
file, nsysmap.many.task)::

    source ──> profile 1 ─> attribute, chunk by chunk ─┬─> partial sums ──> summaries
               profile 2 ─> ...                       └─> sink (held, or ops.parquet)
               (its ranges: by_range; its ops: the totals checked at the end)

A `Source` yields normalised profiles: one whole profile, or the parts of
one input read one at a time (its processes, nsysmap.sources.by_process), of which
only one is held at a time. The sink (nsysmap.output.ops_sinks) decides
what stays in memory: `HoldOps` keeps the OPS rows, `StreamOps` streams
them into ops.parquet. Summaries add up over the profiles (by_range per
profile, merged); overlap, waits and inference read the OPS rows from the
sink's store, the same way whichever it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any

import polars as pl

from nsysmap.attribution.attribute import attribute_chunks
from nsysmap.attribution.rules import NameRules
from nsysmap.core import schemas
from nsysmap.core.errors import NoGpuData
from nsysmap.core.profile import NestedProfile
from nsysmap.core.timings import Stages
from nsysmap.flow.analysis import Analysis, flow_tables
from nsysmap.flow.leftovers import Leftovers
from nsysmap.infer.summary import INFER_COLUMNS, Inferred, combined, infer_ops, infer_scan
from nsysmap.intervals.preorder import Preorder
from nsysmap.output.ops_sinks import HeldOps, OpsSink, OpsStore
from nsysmap.output.writer import build_manifest
from nsysmap.sources.by_window import PartsCheck
from nsysmap.sources.choose import Source
from nsysmap.structure.model import Parts, structure_in_parts
from nsysmap.summaries.by_range import by_range, combine_leaves, merge_by_range
from nsysmap.summaries.conservation import check_conservation
from nsysmap.summaries.summarise import (
    LEAVES,
    Summaries,
    combine_summaries,
    partial_summaries,
    summarise,
    with_overlap,
    with_waits,
)


@dataclass(frozen=True)
class Settings:
    """How the flow runs, and what its manifest records."""

    rules: NameRules
    infer: bool = True
    options: dict[str, Any] | None = None
    source: dict[str, Any] | None = None  # the manifest's input identity
    release: bool = False  # keep no ranges nor API calls in `Analysis.profile` (a file's flow)
    stages: Stages = field(default_factory=lambda: Stages(progress=False))
    structure: bool = True  # find the profile's structure (nsysmap.structure)
    measure: tuple[str, ...] = ()  # the user's --measure rules: ranges of the measured region


def flow(
    source: Source,
    sink_for: Callable[[NestedProfile], OpsSink],
    settings: Settings,
    on_read: Callable[[], None] = lambda: None,
) -> Analysis:
    """Attribute, summarise and infer `source`'s profiles; the OPS rows go to a sink.

    `sink_for(first profile)` gives the sink; `on_read` is called once the
    first profile is read. `Analysis.profile` is the source's one profile
    (released of its ranges and API calls with `settings.release`), or, for
    a source read apart, the parts' meta, threads and devices merged.
    """
    profiles = iter(source.profiles)
    first = next(profiles, None)
    if first is None:
        raise NoGpuData("no profile to attribute")
    if source.check is None:
        _require_ops(first)
    on_read()
    sink = sink_for(first)
    chained = chain([first], profiles)
    del first  # one part at a time: the flow holds no other reference to it
    store, summaries, leftovers = _summarised(chained, source, sink, settings)
    refused = None if source.check is None else source.check.refusal()
    if refused is not None and source.fallback is not None:
        del store, summaries, leftovers, chained
        _close(profiles)  # the part it stopped at is let go before the input is read again
        return flow(source.fallback(refused), sink_for, settings)
    profile, totals = leftovers.profile(settings.release), leftovers.input_totals()
    ranges = leftovers.ranges() if settings.structure else None
    del leftovers  # what follows runs without the ranges and API calls of a released profile
    return _completed(profile, store, summaries, totals, settings, ranges)


def _summarised(
    profiles: Iterator[NestedProfile], source: Source, sink: OpsSink, settings: Settings
) -> tuple[OpsStore, Summaries, Leftovers]:
    """The OPS rows in `sink`, the summary tables, and what is left of the profiles."""
    stages, leftovers = settings.stages, Leftovers(source.apart, source.merged)
    parts: list[dict[str, pl.DataFrame]] = []
    chunks = _chunks(profiles, leftovers, parts, sink.chunk_rows, settings, source.check)
    store = _taken(chunks, parts, sink, stages)
    with stages.stage("summarise", "summarising"):
        summaries = combine_summaries(parts)
        carried = None if source.check is None else source.check.carried_instances()
        summaries = summaries.replaced(by_range=merge_by_range(leftovers.by_range, carried))
        summaries = _per_device(summaries, store, leftovers.waits_context())
    return store, summaries, leftovers


def _per_device(
    summaries: Summaries,
    store: OpsStore,
    context: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame | None],
) -> Summaries:
    """`summaries` with the overlap and the waits of the OPS rows, worked out a device
    at a time where they were streamed to ops.parquet (both are per device, their
    tables sorted by device first: the devices' tables, one after the other, are
    those of all the rows at once). The waits read phase and module as codes (four
    bytes an op, not a text each; their tables hold texts)."""
    tables: dict[str, list[pl.DataFrame]] = {}
    for ops in _apart(store, "device_id"):
        part = with_overlap(summaries, ops)
        coded = ops.with_columns(pl.col("phase", "module").cast(pl.Categorical))
        part = with_waits(part, coded, *context)
        for name, table in {"overlap": part.frames["overlap"], **part.waits}.items():
            tables.setdefault(name, []).append(table)
    whole = {
        name: parts[0] if len(parts) == 1 else pl.concat(parts) for name, parts in tables.items()
    }
    overlap = whole.pop("overlap")
    return replace(summaries.replaced(overlap=overlap), waits=whole)


def _apart(store: OpsStore, column: str) -> list[pl.LazyFrame]:
    """The OPS rows, held all at once; streamed, one value of `column` at a time
    (ascending, the rows without one last)."""
    scan = store.scan()
    if isinstance(store, HeldOps):
        return [scan]
    values = scan.select(pl.col(column).unique().sort(nulls_last=True)).collect()
    if values.height < 2:
        return [scan]
    on = [pl.col(column).is_null() if v is None else pl.col(column) == v for v in values[column]]
    return [scan.filter(mine) for mine in on]


def _processes(store: OpsStore) -> Parts:
    """The OPS rows a process at a time (nsysmap.structure.model.Parts): held, all at
    once; streamed, each process read from ops.parquet when asked for."""
    scans = _apart(store, "pid")

    def parts(columns: tuple[str, ...]) -> Iterable[pl.DataFrame]:
        for scan in scans:
            yield scan.select(columns).collect()

    return parts


def _chunks(
    profiles: Iterator[NestedProfile],
    leftovers: Leftovers,
    parts: list[dict[str, pl.DataFrame]],
    chunk_rows: int | None,
    settings: Settings,
    check: PartsCheck | None = None,
) -> Iterator[pl.DataFrame]:
    """The OPS chunks of each profile in turn, `chunk_rows` rows at a time.

    The caller summarises each chunk into `parts` before asking for the
    next; once a profile's last chunk is out, its by_range is taken from
    those chunks' range leaves, and it is let go before the next is read.
    With a `check` (time windows), a window without operations adds only its
    meta, and the chunks stop once the check refuses them.
    """
    profile = next(profiles, None)
    while profile is not None:
        if check is not None:
            check.next_part()
        if check is None or profile.ops.height:
            _require_ops(profile)
            start, found = len(parts), list[Preorder | None]()
            yield from _checked(
                attribute_chunks(
                    profile,
                    chunk_rows=chunk_rows,
                    rules=settings.rules,
                    launches=leftovers.launches,
                    preorders=found,
                ),
                check,
            )
            with settings.stages.stage("summarise", "summarising"):
                leaves = combine_leaves([part.pop(LEAVES) for part in parts[start:]])
                ordered = found[0] if found else None
                leftovers.add(profile, by_range(leaves, profile.ranges, ordered))
            del leaves, found, ordered
        else:
            leftovers.add(profile, schemas.empty(schemas.BY_RANGE))
        del profile
        if check is not None and check.refused is not None:
            return
        profile = next(profiles, None)


def _checked(chunks: Iterator[pl.DataFrame], check: PartsCheck | None) -> Iterator[pl.DataFrame]:
    for chunk in chunks:
        if check is not None:
            check.chunk(chunk)
        yield chunk


def _taken(
    chunks: Iterator[pl.DataFrame],
    parts: list[dict[str, pl.DataFrame]],
    sink: OpsSink,
    stages: Stages,
) -> OpsStore:
    """`chunks` given to `sink`, each chunk's partial summaries appended to `parts`
    before the next chunk is asked for.

    Times attribution, the partial summaries and the sink's own work (its
    `stage`) apart, although they interleave; stages that `chunks` times
    itself (reading the next process) are not counted again as attribution.
    """
    spent = {"attribute": 0.0, "summarise": 0.0}

    def summarised() -> Iterator[pl.DataFrame]:
        while True:
            start, timed = time.perf_counter(), sum(stages.timings.values())
            chunk = next(chunks, None)
            middle = time.perf_counter()
            spent["attribute"] += middle - start - (sum(stages.timings.values()) - timed)
            if chunk is None:
                return
            parts.append(partial_summaries(chunk))
            spent["summarise"] += time.perf_counter() - middle
            yield chunk

    start, timed = time.perf_counter(), sum(stages.timings.values())
    with stages.progress("attributing"):
        store = sink.take(summarised())
    inside = sum(stages.timings.values()) - timed  # stages timed by `chunks` itself
    for name, seconds in spent.items():
        stages.add(name, seconds)
    stages.add(sink.stage, time.perf_counter() - start - sum(spent.values()) - inside)
    return store


def _completed(
    profile: NestedProfile,
    store: OpsStore,
    summaries: Summaries,
    totals: pl.DataFrame,
    settings: Settings,
    ranges: pl.DataFrame | None = None,
) -> Analysis:
    """The rest of the flow, from the OPS rows and summaries: inference, the structure
    (from the OPS rows, the inferred labels and the kept `ranges`), the conservation
    check against the input's `totals` (`input_totals`) and the manifest (`profile`'s
    operations and ranges are not read)."""
    inferred = structure = None
    if settings.infer:
        with settings.stages.stage("infer", "inferring blocks"):
            inferred = _inferred(store)
    if settings.structure:
        with settings.stages.stage("structure", "finding the structure"):
            labels = inferred.labels if inferred is not None else None
            parts = _processes(store)
            structure = structure_in_parts(parts, ranges, labels, settings.rules, settings.measure)
    source_path = profile.meta_value("source_path")
    check_conservation(totals, summaries, store.scan(), store.rows, source_path)
    made = flow_tables(summaries, inferred, structure)
    tables: dict[str, pl.DataFrame | int] = {"ops": store.rows, **made}
    options = _recorded_options(settings)
    manifest = build_manifest(profile, tables, options=options, source=settings.source)
    return Analysis(profile, store, summaries, manifest, inferred=inferred, structure=structure)


def _inferred(store: OpsStore) -> Inferred:
    """Inference over the OPS rows: only the columns it reads, and for rows streamed
    to ops.parquet one device at a time (inference is per device; a lower peak), first
    the few columns of its kernel sequence, then those its summaries compare with."""
    if isinstance(store, HeldOps):
        return infer_ops(store.read(INFER_COLUMNS))
    return combined([infer_scan(ops) for ops in _apart(store, "device_id")])


def _recorded_options(settings: Settings) -> dict[str, Any]:
    """The manifest's options: the caller's, the name rules, and inference when off."""
    off = {} if settings.infer else {"infer": False}
    measure = {"measure_rules": list(settings.measure)} if settings.measure else {}
    return {**(settings.options or {}), **settings.rules.options(), **measure, **off}


def process_summary(analysis: Analysis, pid: int | None) -> Summaries:
    """The summary tables of process `pid`'s operations alone, of a flow over several
    processes (several reports: one rank each, nsysmap.many.task); without by_range,
    whose ranges the flow has not kept."""
    return summarise(analysis.store.scan().filter(pl.col("pid") == pid).collect())


def _close(profiles: Iterator[NestedProfile]) -> None:
    """End a source's profiles early (a generator paused at a part lets go of it)."""
    close = getattr(profiles, "close", None)
    if close is not None:
        close()


def _require_ops(profile: NestedProfile) -> None:
    if profile.ops.is_empty():
        where = profile.meta_value("source_path") or "profile"
        raise NoGpuData(f"{where}: no GPU operations to attribute")
