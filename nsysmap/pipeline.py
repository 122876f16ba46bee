"""The one flow: read -> normalise -> attribute -> summarise -> write.

`load_profile` (nsysmap.load: read, then normalise) and `write` are the only
steps that touch files; `analyse` in
between is pure. Attribution runs block by block on every path: each block
is summarised (partial sums, combined at the end) and handed to a sink
(nsysmap.output.ops_sinks) that holds the rows in memory (`analyse`, inputs
that fit) or streams them into a staged ops.parquet (`analyse_file`, above
STREAM_OPS operations). `Analysis.store` says which; overlap and
inference read the rows from it, the same way on both. Each step can be
timed by a `Stages` (which also shows progress on a terminal);
`analyse_file` returns the timings in `Analysis.timings`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap.attribution.attribute import attribute_blocks
from nsysmap.attribution.rules import BUILTIN, NameRules
from nsysmap.by_process import ByProcess, process_blocks, split_processes
from nsysmap.errors import NoGpuData
from nsysmap.infer.summary import INFER_COLUMNS, LAYER_INDEX, Inferred, combined, infer_ops
from nsysmap.load import expected_kind, load_profile
from nsysmap.output.conservation import check_conservation, input_totals
from nsysmap.output.ops_sinks import HeldOps, HoldOps, OpsSink, OpsStore, StreamOps
from nsysmap.output.placement import check_output_dir, staging
from nsysmap.output.summarise import (
    LEAVES,
    Summaries,
    combine_summaries,
    partial_summaries,
    with_overlap,
    with_waits,
)
from nsysmap.output.summary_text import render_summary
from nsysmap.output.writer import (
    OPS_FILE,
    build_manifest,
    input_identity,
    table_entries,
    write_outputs,
)
from nsysmap.profile import NestedProfile, Profile
from nsysmap.read.regular_file import regular_file
from nsysmap.stages import Stages

# Profiles with more operations than this are streamed by `analyse_file`:
# their OPS rows go into ops.parquet as they are made, never all in memory.
STREAM_OPS = 2_000_000


@dataclass(frozen=True)
class Analysis:
    """Everything one run of the flow produced."""

    profile: NestedProfile
    store: OpsStore  # the OPS rows: held in memory, or in a Parquet file
    summaries: Summaries
    manifest: dict[str, Any]  # what manifest.json will say: every table written is listed
    out_dir: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage
    inferred: Inferred | None = None  # steps, phases, blocks from the kernel sequence
    # Tables from outside the flow written with it (the profiled model's FLOPs, `with_tables`)
    extra_tables: dict[str, pl.DataFrame] = field(default_factory=dict)

    @property
    def summary_text(self) -> str:
        """The terminal summary, rendered when asked for (the CLI prints it)."""
        meta = dict(zip(self.profile.meta["key"], self.profile.meta["value"], strict=True))
        by_module = self.summaries.by_module
        return render_summary(self.summaries, meta) + inferred_text(self.inferred, by_module)

    @property
    def ops(self) -> pl.DataFrame:
        """One OPS row per operation (read from ops.parquet when it was streamed)."""
        return self.store.read()


def analyse(
    profile: NestedProfile,
    *,
    options: dict[str, Any] | None = None,
    source: dict[str, Any] | None = None,
    stages: Stages | None = None,
    rules: NameRules = BUILTIN,
    infer: bool = True,
) -> Analysis:
    """Attribute, summarise and infer a normalised profile (pure: no file access).

    The OPS rows are held in memory. `rules` read step and phase names
    (nsysmap.attribution.rules); the user's rules among them are recorded
    in the manifest's options. `infer`: also infer steps, phases and blocks
    from the kernel sequence (nsysmap.infer). `options` and `source` go into
    the manifest as they are.
    """
    return _analysed(profile, HoldOps(), options, source, stages, rules, infer)


def _analysed(
    profile: NestedProfile,
    sink: OpsSink,
    options: dict[str, Any] | None,
    source: dict[str, Any] | None,
    stages: Stages | None,
    rules: NameRules,
    infer: bool,
) -> Analysis:
    """The flow after reading: blocks attributed, summarised and handed to `sink`."""
    stages = stages or Stages(progress=False)
    store, summaries = _summarised(profile, sink, stages, rules)
    totals = input_totals(profile.ops)
    return _completed(profile, store, summaries, totals, options, source, stages, rules, infer)


def _summarised(
    profile: NestedProfile, sink: OpsSink, stages: Stages, rules: NameRules
) -> tuple[OpsStore, Summaries]:
    """The OPS rows in `sink`, and the summary tables: the steps that read the ranges."""
    _require_ops(profile)
    launches: list[pl.DataFrame] = []  # the launch calls' durations, from attribution's join
    store, parts = _attributed(profile, sink, stages, rules, launches)
    with stages.stage("summarise", "summarising"):
        summaries = with_overlap(combine_summaries(parts, profile.ranges), store.scan())
        calls, ranges = profile.api_calls, profile.ranges
        summaries = with_waits(summaries, store.scan(), calls, ranges, launches[0])
    return store, summaries


def _completed(
    profile: NestedProfile,
    store: OpsStore,
    summaries: Summaries,
    totals: pl.DataFrame,
    options: dict[str, Any] | None,
    source: dict[str, Any] | None,
    stages: Stages,
    rules: NameRules,
    infer: bool,
) -> Analysis:
    """The rest of the flow, from the OPS rows and summaries: inference, the
    conservation check against the input's `totals` (`input_totals`) and the
    manifest (`profile`'s operations and ranges are not read)."""
    inferred = None
    if infer:
        with stages.stage("infer", "inferring blocks"):
            inferred = _inferred(store)
    options = _recorded_options(options, rules, infer)
    source_path = profile.meta_value("source_path")
    check_conservation(totals, summaries, store.scan(), store.rows, source_path)
    tables: dict[str, pl.DataFrame | int] = {"ops": store.rows, **_flow_tables(summaries, inferred)}
    manifest = build_manifest(profile, tables, options=options or {}, source=source)
    return Analysis(profile, store, summaries, manifest, inferred=inferred)


def _inferred(store: OpsStore) -> Inferred:
    """Inference over the OPS rows: only the columns it reads, and for rows streamed
    to ops.parquet one device at a time (inference is per device; a lower peak)."""
    if isinstance(store, HeldOps):
        return infer_ops(store.read(INFER_COLUMNS))
    scan = store.scan()
    devices = scan.select(pl.col("device_id").unique().sort(nulls_last=True)).collect()
    parts = []
    for device in devices["device_id"]:
        mine = pl.col("device_id").is_null() if device is None else pl.col("device_id") == device
        parts.append(infer_ops(scan.filter(mine).select(INFER_COLUMNS).collect()))
    return combined(parts)


def _flow_tables(summaries: Summaries, inferred: Inferred | None) -> dict[str, pl.DataFrame]:
    """The tables the flow writes besides ops.parquet: the summaries, then the inferred ones."""
    inferred_tables = inferred.tables() if inferred is not None else {}
    return summaries.tables() | summaries.waits | inferred_tables


def _attributed(
    profile: NestedProfile,
    sink: OpsSink,
    stages: Stages,
    rules: NameRules,
    launches: list[pl.DataFrame],
) -> tuple[OpsStore, list[dict[str, pl.DataFrame]]]:
    """The OPS rows given to `sink` block by block, and each block's partial summaries
    (`launches` gets the launch calls' durations: `attribute_blocks`)."""
    blocks = attribute_blocks(profile, block_rows=sink.block_rows, rules=rules, launches=launches)
    parts: list[dict[str, pl.DataFrame]] = []
    return _taken(blocks, parts, sink, stages), parts


def _taken(
    blocks: Iterator[pl.DataFrame],
    parts: list[dict[str, pl.DataFrame]],
    sink: OpsSink,
    stages: Stages,
) -> OpsStore:
    """`blocks` given to `sink`, each block's partial summaries appended to `parts`
    before the next block is asked for.

    Times attribution, the partial summaries and the sink's own work (its
    `stage`) apart, although they interleave; stages that `blocks` times
    itself (reading the next process) are not counted again as attribution.
    """
    spent = {"attribute": 0.0, "summarise": 0.0}

    def summarised() -> Iterator[pl.DataFrame]:
        while True:
            start, timed = time.perf_counter(), sum(stages.timings.values())
            block = next(blocks, None)
            middle = time.perf_counter()
            spent["attribute"] += middle - start - (sum(stages.timings.values()) - timed)
            if block is None:
                return
            parts.append(partial_summaries(block))
            spent["summarise"] += time.perf_counter() - middle
            yield block

    start, timed = time.perf_counter(), sum(stages.timings.values())
    with stages.progress("attributing"):
        store = sink.take(summarised())
    inside = sum(stages.timings.values()) - timed  # stages timed by `blocks` itself
    for name, seconds in spent.items():
        stages.add(name, seconds)
    stages.add(sink.stage, time.perf_counter() - start - sum(spent.values()) - inside)
    return store


def _recorded_options(
    options: dict[str, Any] | None, rules: NameRules, infer: bool
) -> dict[str, Any]:
    """The manifest's options: the caller's, the name rules, and inference when off."""
    return {**(options or {}), **rules.options(), **({} if infer else {"infer": False})}


def _require_ops(profile: Profile) -> None:
    if profile.ops.is_empty():
        where = profile.meta_value("source_path") or "profile"
        raise NoGpuData(f"{where}: no GPU operations to attribute")


def with_tables(
    analysis: Analysis, tables: Mapping[str, pl.DataFrame], **manifest: Any
) -> Analysis:
    """The analysis with `tables` to be written with it and listed in its manifest (pure).

    `manifest` items are added to the manifest as they are (say, what the
    tables describe); the manifest is still written once, by `write`.
    """
    listed = {**analysis.manifest["tables"], **table_entries(tables)}
    return replace(
        analysis,
        extra_tables={**analysis.extra_tables, **tables},
        manifest={**analysis.manifest, **manifest, "tables": listed},
    )


def inferred_text(inferred: Inferred | None, by_module: pl.DataFrame) -> str:
    """The terminal summary's inferred-block lines.

    Empty without inference, and when the profile's own modules already name
    its blocks (`transformer.h.3`): the inferred tables are still written.
    """
    if inferred is None or by_module["module"].str.contains(LAYER_INDEX).any():
        return ""
    return "".join(f"\n{line}\n" for line in inferred.lines())


def write(analysis: Analysis, out_dir: str | Path, *, stages: Stages | None = None) -> Analysis:
    """Write the Parquet tables and manifest into `out_dir`; returns the analysis there."""
    out_dir = Path(out_dir)
    stages = stages or Stages(progress=False)
    with stages.stage("write", "writing"):
        tables = _flow_tables(analysis.summaries, analysis.inferred) | analysis.extra_tables
        write_outputs(tables, analysis.manifest, out_dir, ops=analysis.store)
    return replace(
        analysis,
        store=analysis.store.placed(out_dir),
        out_dir=out_dir,
        timings={**analysis.timings, **stages.timings},
    )


def analyse_file(
    path: str | Path,
    out_dir: str | Path,
    *,
    options: dict[str, Any] | None = None,
    stages: Stages | None = None,
    rules: NameRules = BUILTIN,
    infer: bool = True,
    memory_gb: float | None = None,
) -> Analysis:
    """`nsysmap attribute`: the whole flow from a file.

    The returned `Analysis.profile` holds the profile's operations, threads,
    devices and meta; its ranges, API calls and graph links are released once
    the summaries are taken, to lower the peak memory of what follows (read
    them with `load_profile` when needed).

    An nsys export that would need more than `memory_gb` (None: 80 % of the
    memory available) is attributed one process at a time when it has
    several (nsysmap.by_process); `Analysis.profile` then holds only the meta,
    threads and devices.

    The input's SHA-256 (for the manifest) is computed in a background
    thread while the profile is attributed; `timings` gets its duration as
    "hash" (mostly off the critical path). Progress shows on
    stderr when it is a terminal, unless `stages` says otherwise.
    """
    path, out_dir = Path(path), check_output_dir(out_dir)
    path = regular_file(path, expected_kind(path))
    stages = stages or Stages()
    stop = threading.Event()
    with ThreadPoolExecutor(1) as pool, ExitStack() as cleanup:
        try:
            hashed = []

            def read() -> None:  # hashed beside attribution (reading keeps both cores busy)
                hashed.append(pool.submit(_timed_identity, path, stop))

            def staged() -> Path:  # large OPS rows are staged beside out_dir, then moved in
                return cleanup.enter_context(staging(out_dir)) / OPS_FILE

            flow = _summarised_file(path, read, staged, stages, rules, memory_gb)
            analysis = _completed(*flow, options, None, stages, rules, infer)
        except BaseException:
            stop.set()  # do not make a failure wait for the hash
            raise
        source, hash_s = hashed[0].result()
        manifest = {**analysis.manifest, "input": source}
        analysis = replace(analysis, manifest=manifest, timings={**stages.timings, "hash": hash_s})
        return write(analysis, out_dir, stages=stages)


def _summarised_file(
    path: Path,
    read: Callable[[], None],
    staged: Callable[[], Path],
    stages: Stages,
    rules: NameRules,
    memory_gb: float | None,
) -> tuple[NestedProfile, OpsStore, Summaries, pl.DataFrame]:
    """(the profile released, the OPS rows, the summaries, the input's totals) of `path`.

    `read` is called once the input is read (whole, or its first process);
    `staged()` is where to stream the OPS rows of a large profile.
    """
    processes = split_processes(path, memory_gb)
    if processes is not None:
        read()
        return _summarised_by_process(path, processes, StreamOps(staged()), stages, rules)
    profile = load_profile(path, stages=stages)
    read()
    sink: OpsSink = HoldOps() if profile.ops.height <= STREAM_OPS else StreamOps(staged())
    store, summaries = _summarised(profile, sink, stages, rules)
    # The profile's last reference goes on return: inference and what follows run
    # without its ranges and API calls (at 10^7 kernels, 4.9 of its 6.6 GB).
    return profile.released(), store, summaries, input_totals(profile.ops)


def _summarised_by_process(
    path: Path, processes: list[int], sink: StreamOps, stages: Stages, rules: NameRules
) -> tuple[NestedProfile, OpsStore, Summaries, pl.DataFrame]:
    """`_summarised_file` one process at a time (nsysmap.by_process)."""
    parts: list[dict[str, pl.DataFrame]] = []
    kept = ByProcess()

    def leaves_of(first: int) -> list[pl.DataFrame]:
        return [part.pop(LEAVES) for part in parts[first:]]  # not kept once used

    blocks = process_blocks(
        path, processes, leaves_of, kept, block_rows=sink.block_rows, rules=rules, stages=stages
    )
    store = _taken(blocks, parts, sink, stages)
    with stages.stage("summarise", "summarising"):
        summaries = replace(combine_summaries(parts), by_range=kept.merged_by_range())
        summaries = with_overlap(summaries, store.scan())
        # One process at a time, the API calls and ranges are gone: the waits have no
        # launch-call times nor synchronisations (docs/waits.md).
        none = kept.profile()
        summaries = with_waits(summaries, store.scan(), none.api_calls, none.ranges)
    return kept.profile(), store, summaries, kept.input_totals()


def _timed_identity(path: Path, stop: threading.Event) -> tuple[dict[str, Any], float]:
    start = time.perf_counter()
    return input_identity(path, stop), time.perf_counter() - start
