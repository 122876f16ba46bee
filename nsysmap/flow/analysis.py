"""What one run of the flow produced (`Analysis`), and the tables it writes.

Made by the one flow (nsysmap.flow.run_stages), written by `nsysmap.flow.verbs.write`;
`with_tables` adds tables from outside the flow (the profiled model's
FLOPs) to be written with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap.core.profile import NestedProfile
from nsysmap.core.units import cpu_trace
from nsysmap.infer.summary import LAYER_INDEX, Inferred
from nsysmap.output.ops_sinks import OpsStore
from nsysmap.output.writer import table_entries
from nsysmap.structure.words import structure_lines
from nsysmap.summaries.fix_first_text import findings_lines
from nsysmap.summaries.summarise import Summaries
from nsysmap.summaries.summary_text import render_summary
from nsysmap.waits.text import stream_work


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
    structure: pl.DataFrame | None = None  # regions, steps, passes (nsysmap.structure)
    # What to fix first: added before the write (nsysmap.findings.with_findings), also a table
    findings: pl.DataFrame | None = None
    # Tables from outside the flow written with it (the profiled model's FLOPs, `with_tables`)
    extra_tables: dict[str, pl.DataFrame] = field(default_factory=dict)

    @property
    def summary_text(self) -> str:
        """The terminal summary, rendered when asked for (the CLI prints it)."""
        meta = dict(zip(self.profile.meta["key"], self.profile.meta["value"], strict=True))
        by_module = self.summaries.by_module
        total = int(self.summaries.coverage["time_ns"].sum())
        cpu = cpu_trace(meta)  # times are CPU operator self time
        work = stream_work(self.store.scan())  # the waits' busiest stream is not NCCL's
        text = render_summary(self.summaries, meta, work=work)
        text += structure_text(self.structure, total, cpu)
        text += inferred_text(self.inferred, by_module, passes=self.structure is None, cpu=cpu)
        found = findings_lines(self.findings)
        return f"{text}\n{found}" if found else text

    @property
    def ops(self) -> pl.DataFrame:
        """One OPS row per operation (read from ops.parquet when it was streamed)."""
        return self.store.read()

    def tables(self) -> dict[str, pl.DataFrame]:
        """Every table written besides ops.parquet: the summaries, the inferred ones,
        then those added by `with_tables`."""
        return flow_tables(self.summaries, self.inferred, self.structure) | self.extra_tables


def flow_tables(
    summaries: Summaries, inferred: Inferred | None, structure: pl.DataFrame | None = None
) -> dict[str, pl.DataFrame]:
    """The tables the flow writes besides ops.parquet: the summaries, the inferred ones,
    then the structure."""
    inferred_tables = inferred.tables() if inferred is not None else {}
    structure_table = {"structure": structure} if structure is not None else {}
    return summaries.tables() | summaries.waits | inferred_tables | structure_table


def structure_text(structure: pl.DataFrame | None, total_ns: int, cpu: bool) -> str:
    """The terminal summary's structure lines (empty without a structure); shares of
    `total_ns`, all the operations' time: CPU operator self time where `cpu` (a trace
    without GPU work), else GPU time."""
    if structure is None or structure.is_empty():
        return ""
    lines = structure_lines(structure, total_ns, cpu=cpu)
    return "\nStructure: " + lines[0] + "".join(f"\n  {line}" for line in lines[1:]) + "\n"


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


def inferred_text(
    inferred: Inferred | None, by_module: pl.DataFrame, passes: bool = True, *, cpu: bool = False
) -> str:
    """The terminal summary's inferred-block lines (`cpu`: of CPU operators, see
    `Inferred.lines`).

    Empty without inference, and when the profile's own modules already name
    its blocks (`transformer.h.3`): the inferred tables are still written.
    """
    if inferred is None or by_module["module"].str.contains(LAYER_INDEX).any():
        return ""
    return "".join(f"\n{line}\n" for line in inferred.lines(passes, cpu=cpu))
