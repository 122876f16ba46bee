"""The public verbs of the flow: `analyse` (a profile in memory), `analyse_file`, `write`.

Each drives the one flow (nsysmap.flow.run_stages: a source's profiles -> attribute ->
summarise -> infer) with its own source and sink: `analyse` a profile
already read, its OPS rows held in memory; `analyse_file` a file, read
whole or one process at a time (nsysmap.sources.by_process), its OPS rows held or,
above ops_sinks.STREAM_OPS operations, streamed into ops.parquet (nsysmap.output.ops_sinks).
`nsysmap run` goes through `attribute_file` too, adding the model's FLOPs
before the write. `load_profile` (nsysmap.sources.reading: read, then normalise) and
`write` are the only steps that touch files. Each step can be timed by a
`Stages` (which also shows progress on a terminal); `analyse_file` returns
the timings in `Analysis.timings`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from nsysmap.attribution.rules import BUILTIN, NameRules
from nsysmap.core.profile import NestedProfile
from nsysmap.core.timings import Stages
from nsysmap.flow.analysis import Analysis, inferred_text, with_tables
from nsysmap.flow.run_stages import Settings, flow
from nsysmap.output.ops_sinks import HoldOps, OpsSink, sink_for
from nsysmap.output.placement import check_output_dir, staging
from nsysmap.output.writer import OPS_FILE, OUTPUT_NAMES, input_identity, write_outputs
from nsysmap.sources.choose import choose, whole
from nsysmap.sources.input_kinds import kind_of
from nsysmap.sources.reading import load_profile

__all__ = [
    "Analysis",
    "analyse",
    "analyse_file",
    "attribute_file",
    "inferred_text",
    "load_profile",
    "with_tables",
    "write",
]


def analyse(
    profile: NestedProfile,
    *,
    options: dict[str, Any] | None = None,
    source: dict[str, Any] | None = None,
    stages: Stages | None = None,
    rules: NameRules = BUILTIN,
    infer: bool = True,
    measure: tuple[str, ...] = (),
) -> Analysis:
    """Attribute, summarise and infer a normalised profile (pure: no file access).

    The OPS rows are held in memory. `rules` read step and phase names
    (nsysmap.attribution.rules); the user's rules among them are recorded
    in the manifest's options. `infer`: also infer steps, phases and blocks
    from the kernel sequence (nsysmap.infer). `measure`: the `--measure` rules, ranges
    of the measured region (nsysmap.structure). `options` and `source` go into
    the manifest as they are.
    """
    stages = stages or Stages(progress=False)
    settings = Settings(rules, infer, options, source, stages=stages, measure=measure)
    return flow(whole(profile), lambda _: HoldOps(), settings)


def write(analysis: Analysis, out_dir: str | Path, *, stages: Stages | None = None) -> Analysis:
    """Write the Parquet tables and manifest into `out_dir`; returns the analysis there."""
    out_dir = Path(out_dir)
    stages = stages or Stages(progress=False)
    with stages.stage("write", "writing"):
        write_outputs(analysis.tables(), analysis.manifest, out_dir, ops=analysis.store)
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
    measure: tuple[str, ...] = (),
    before_write: Callable[[Analysis], Analysis] = lambda analysis: analysis,
) -> Analysis:
    """`nsysmap attribute`: the whole flow from a file; `before_write` is applied to the
    analysis before it is written (`nsysmap attribute` adds its findings:
    nsysmap.findings.with_findings).

    The returned `Analysis.profile` holds the profile's operations, threads,
    devices and meta; its ranges, API calls and graph links are released once
    the summaries are taken, to lower the peak memory of what follows, and the
    kernels' grid and block of a `.sqlite` export are not read (read them
    with `load_profile` when needed).

    An nsys export that would need more than `memory_gb` (None: 6 GB, or 80 %
    of the memory available where less) is attributed one process at a time
    when it has several (nsysmap.sources.by_process), and one time window at a
    time when it has one or a process's share is over the budget too
    (nsysmap.sources.by_window); `Analysis.profile` then holds only the meta,
    threads and devices.

    The input's SHA-256 (for the manifest) is computed in a background
    thread while the profile is attributed; `timings` gets its duration as
    "hash" (mostly off the critical path). Progress shows on
    stderr when it is a terminal, unless `stages` says otherwise.
    """
    settings = Settings(
        rules, infer, options, release=True, stages=stages or Stages(), measure=measure
    )
    return attribute_file(Path(path), out_dir, settings, memory_gb, before_write)


def attribute_file(
    path: Path,
    out_dir: str | Path,
    settings: Settings,
    memory_gb: float | None = None,
    before_write: Callable[[Analysis], Analysis] = lambda analysis: analysis,
) -> Analysis:
    """`analyse_file` with its settings, and `before_write` applied to the
    analysis before it is written (`nsysmap run` adds the model's FLOPs)."""
    out_dir = check_output_dir(out_dir, OUTPUT_NAMES)
    kind = kind_of(path)  # the one check of the path, before the hash reads it
    stages = settings.stages
    stop = threading.Event()
    with ThreadPoolExecutor(1) as pool, ExitStack() as cleanup:
        try:
            hashed = []

            def read() -> None:  # hashed beside attribution (reading keeps both cores busy)
                hashed.append(pool.submit(_timed_identity, path, stop))

            source = choose(path, kind, memory_gb, stages)

            def staged() -> Path:  # large OPS rows are staged beside out_dir, then moved in
                return cleanup.enter_context(staging(out_dir)) / OPS_FILE

            def sink(profile: NestedProfile) -> OpsSink:
                return sink_for(profile.ops.height, staged, stream=source.apart)

            analysis = flow(source, sink, settings, on_read=read)
        except BaseException:
            stop.set()  # do not make a failure wait for the hash
            raise
        identity, hash_s = hashed[0].result()
        manifest = {**analysis.manifest, "input": identity}
        analysis = replace(analysis, manifest=manifest, timings={**stages.timings, "hash": hash_s})
        return write(before_write(analysis), out_dir, stages=stages)


def _timed_identity(path: Path, stop: threading.Event) -> tuple[dict[str, Any], float]:
    start = time.perf_counter()
    return input_identity(path, stop), time.perf_counter() - start
