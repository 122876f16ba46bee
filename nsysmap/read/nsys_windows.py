"""Where one process's timeline can be cut into time windows read apart (nsysmap.by_window).

Three scans of the export, each in batches reduced as they arrive (nothing
held but the reductions):

1. NVTX: every range of the process (one left open: to the end of time),
   and per autograd sequence number the time from the first to the last
   range carrying it (a forward operator's `seq = N` and the backward's
   `stashed seq = N`, which attribution links). Their union leaves *quiet*
   gaps: a cut at the start of the interval after a gap leaves no range of
   any thread open across it and no sequence number on both sides.
2. CUDA runtime calls: per stretch between two candidate cuts, how many
   calls start there and the extent of their correlation ids (a window's
   GPU work is read by those ids, and kept where a call of the window
   launched it).
3. GPU work: how many rows the process has (what the windows must add up to).

`segments` refuses (a one-line reason) what it cannot cut exactly: no
quiet gap, CUDA graph node captures (a replay is attributed where its graph
was captured, any time before), FSDP hook ranges (paired into spans across
any gap), calls or ranges without a start.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from nsysmap.attribution.labels import FSDP_HOOK, SEQ
from nsysmap.attribution.record_evidence import AUTOGRAD_THREAD
from nsysmap.read import nsys_specs as specs
from nsysmap.read import nsys_sql as sql
from nsysmap.read.nsys_frames import RANGE_KINDS, nvtx_batch
from nsysmap.read.nsys_probe import Export, open_export

END = (1 << 63) - 1  # where a range left open ends
_SPAN, _SEQ, _FSDP, _NO_START = 0, 1, 2, 3  # kinds of the NVTX reduction's rows
_REDUCED = pl.Schema({"kind": pl.Int8, "seq": pl.Int64, "lo": pl.Int64, "hi": pl.Int64})
_NEEDED = {specs.RUNTIME.table: ("start", "correlationId"), specs.NVTX.table: ("start",)}
_NEEDED |= {s.table: ("correlationId",) for s in (specs.KERNEL, specs.MEMCPY, specs.MEMSET)}
_CAPTURES = (specs.GRAPH_NODE_EVENTS, specs.GRAPH_EVENTS)


@dataclass(frozen=True)
class Segments:
    """A process's timeline in stretches between candidate cuts.

    Stretch i holds the calls starting in [cuts[i-1], cuts[i]) (the first
    and last unbounded); `calls` has one row per stretch with calls:
    segment, calls, corr_lo, corr_hi.
    """

    cuts: list[int]
    calls: pl.DataFrame
    ops: int  # the process's rows of GPU work
    autograd: bool  # the process has a thread autograd names (backward work may be there)


def segments(path: str, pid: int) -> Segments | str:
    """The stretches of process `pid`'s timeline, or why it cannot be cut exactly."""
    export = open_export(path)
    refused = _unsupported(export)
    if refused is not None:
        return refused
    strings = specs.strings_table(sql.read_table(export, specs.STRINGS))
    spans = _range_spans(export, pid, strings)
    if isinstance(spans, str):
        return spans
    cuts = quiet_cuts(spans) if spans.height else _even_cuts(export, pid)
    if not cuts:
        return "no moment of the capture has no range open and no autograd link across it"
    calls = _call_stretches(export, pid, cuts)
    if calls["segment"].null_count():
        return "runtime calls without a start time"
    autograd = _has_autograd_thread(export, pid, strings)
    return Segments(cuts, calls.drop_nulls("segment"), _op_rows(export, pid), autograd)


def _unsupported(export: Export) -> str | None:
    for table, columns in _NEEDED.items():
        present = {c.lower() for c in export.columns(table) or ()}
        if table == specs.RUNTIME.table and not present:
            return f"no {table} table"
        if present and any(c.lower() not in present for c in columns):
            return f"{table} lacks {', '.join(columns)}"
    for spec in _CAPTURES:
        found = sql.read_table(export, _counted(spec.table, "start", ""), batch=_height)
        if found is not None and found["n"].sum():
            return "CUDA graph nodes captured (replays are attributed at their capture)"
    return None


def _range_spans(export: Export, pid: int, strings: pl.DataFrame) -> pl.DataFrame | str:
    """Each range's (lo, hi) and each sequence number's, as one frame; or a refusal."""
    reduced = sql.read_table(
        export, specs.NVTX, batch=lambda batch: _reduced(batch, strings), process=pid
    )
    if reduced is None:
        return pl.DataFrame(schema={"lo": pl.Int64, "hi": pl.Int64})  # no NVTX: any cut
    kinds = set(reduced["kind"].unique())
    if _FSDP in kinds:
        return "FSDP hook ranges (paired into spans across any gap)"
    if _NO_START in kinds:
        return "NVTX ranges without a start time"
    seqs = (
        reduced.filter(pl.col("kind") == _SEQ)
        .group_by("seq")
        .agg(pl.col("lo").min(), pl.col("hi").max())
    )
    return pl.concat([reduced.filter(pl.col("kind") == _SPAN).select("lo", "hi"), seqs.drop("seq")])


def _reduced(batch: pl.DataFrame, strings: pl.DataFrame) -> pl.DataFrame:
    """A batch of NVTX rows as _REDUCED rows: its ranges' union, its sequence numbers'
    spans, one row when it holds an FSDP hook or a range without a start."""
    rows = nvtx_batch(batch, strings).filter(pl.col("eventType").is_in(RANGE_KINDS))
    rows = rows.select(lo="start_ns", hi=pl.col("end").fill_null(END), name="name")
    seqs = rows.select("lo", "hi", seq=pl.col("name").str.extract(SEQ, 1).cast(pl.Int64))
    seqs = seqs.drop_nulls("seq").group_by("seq").agg(pl.col("lo").min(), pl.col("hi").max())
    flags = []
    if rows["name"].str.contains(FSDP_HOOK).any():
        flags.append(_FSDP)
    if rows["lo"].null_count():
        flags.append(_NO_START)
    parts = [
        union(rows.drop_nulls("lo").select("lo", "hi")).with_columns(kind=pl.lit(_SPAN)),
        seqs.with_columns(kind=pl.lit(_SEQ)),
        pl.DataFrame({"kind": flags}),
    ]
    return pl.concat(
        [p.cast({c: t for c, t in _REDUCED.items() if c in p.columns}) for p in parts],
        how="diagonal",
    ).select(_REDUCED.names())


def union(spans: pl.DataFrame) -> pl.DataFrame:
    """The union of closed intervals (lo, hi) as disjoint ones, ascending; touching
    intervals are joined."""
    spans = spans.sort("lo")
    reach = pl.col("hi").cum_max().shift(1)
    group = (pl.col("lo") > reach).fill_null(True).cum_sum()
    return (
        spans.group_by(group.alias("g"))
        .agg(pl.col("lo").min(), pl.col("hi").max())
        .sort("lo")
        .select("lo", "hi")
    )


def quiet_cuts(spans: pl.DataFrame) -> list[int]:
    """The start of every interval of the union of `spans` after a gap: a cut there
    leaves each span whole on one side."""
    merged = union(spans)
    return merged["lo"].slice(1).to_list()


# Without ranges, any moment can be cut: this many even cuts over the calls' times.
EVEN_CUTS = 1024


def _even_cuts(export: Export, pid: int) -> list[int]:
    """EVEN_CUTS times spread evenly over the process's runtime calls."""
    spec = _counted(specs.RUNTIME.table, "start", specs.RUNTIME.process)
    found = sql.read_table(
        export,
        spec,
        batch=lambda b: b.select(lo=pl.col("start").min(), hi=pl.col("start").max()),
        process=pid,
    )
    if found is None or found["lo"].min() is None:
        return []
    lo, hi = int(found["lo"].min()), int(found["hi"].max())  # type: ignore[arg-type]
    return sorted({lo + (hi - lo) * i // EVEN_CUTS for i in range(1, EVEN_CUTS)} - {lo})


def _has_autograd_thread(export: Export, pid: int, strings: pl.DataFrame) -> bool:
    names = sql.read_table(export, specs.THREAD_NAMES, process=pid)
    if names is None:
        return False
    named = names.select(name=specs.string_value("nameId", strings))["name"]
    return bool(named.str.contains(AUTOGRAD_THREAD).any())


def _call_stretches(export: Export, pid: int, cuts: list[int]) -> pl.DataFrame:
    """segment, calls, corr_lo, corr_hi per stretch between `cuts` (segment null:
    calls without a start)."""
    bounds = pl.Series(cuts, dtype=pl.Int64)

    def stretch(batch: pl.DataFrame) -> pl.DataFrame:
        at = batch.with_columns(
            segment=pl.when(pl.col("start").is_not_null()).then(
                bounds.search_sorted(batch["start"], side="right")
            )
        )
        return at.group_by("segment").agg(
            calls=pl.len(),
            corr_lo=pl.col("correlationId").min(),
            corr_hi=pl.col("correlationId").max(),
        )

    spec = _counted(specs.RUNTIME.table, "start correlationId", specs.RUNTIME.process)
    parts = sql.read_table(export, spec, batch=stretch, process=pid)
    assert parts is not None  # _unsupported checked the table
    return (
        parts.group_by("segment")
        .agg(pl.col("calls").sum(), pl.col("corr_lo").min(), pl.col("corr_hi").max())
        .sort("segment", nulls_last=True)
    )


def _op_rows(export: Export, pid: int) -> int:
    """The process's rows of GPU work (kernels, copies, memsets, graph replays)."""
    total = 0
    for spec in (specs.KERNEL, specs.MEMCPY, specs.MEMSET, specs.GRAPH_TRACE):
        found = sql.read_table(
            export, _counted(spec.table, "correlationId", spec.process), batch=_height, process=pid
        )
        total += 0 if found is None else int(found["n"].sum())
    return total


def _counted(table: str, ints: str, process: str) -> specs.TableSpec:
    """A spec reading only `ints` of `table`."""
    return specs.TableSpec(table, ints, process=process)


def _height(batch: pl.DataFrame) -> pl.DataFrame:
    return pl.DataFrame({"n": [batch.height]}, schema={"n": pl.Int64})
