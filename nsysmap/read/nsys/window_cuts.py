"""Where one process's timeline can be cut into time windows read apart (nsysmap.sources.by_window).

Three scans of the export, each in batches reduced as they arrive (nothing
held but the reductions):

1. NVTX: candidate cuts, each a range's start, with about how many ranges
   of any thread are open across it (per batch, the start with the fewest
   of the batch's own ranges open across it in each of its
   CANDIDATES_PER_BATCH stretches, plus the ranges of every batch that
   reach past their batch's last start). A range open across a cut is read
   into both windows (nsysmap.sources.window_carry), so cuts need not be quiet; but
   none may cross what cannot be carried: per autograd sequence number the
   time from the first to the last range carrying it (a forward operator's
   `seq = N` and the backward's `stashed seq = N`, which attribution
   links), a range left open (closed at its thread's last event, in
   another window) or an `.item()` range (the waits read each window's).
   Also whether a range names an autograd node, and each batch's start
   times and rowids.
2. CUDA runtime calls: per stretch between two candidate cuts, how many
   calls start there, the extent of their correlation ids (a window's GPU
   work is read by those ids, and kept where a call of the window launched
   it) and of their rowids.
3. GPU work: how many rows the process has (what the windows must add up
   to), and each batch's correlation ids and rowids.

The rowids (per CHUNK_ROWS rows) let each window read only the stretches of
a table that hold its rows (`Segments.window`); an NVTX row that started
before any range of its chunk ended (an outer range, written when it closed)
is kept apart and read by rowid in the window of its start, so that it does
not stretch its chunk over the whole run. The scans themselves are in
nsysmap.read.nsys.window_scans. The threads autograd names are read too (for
nsysmap.sources.by_window's check).

`segments` refuses (a one-line reason) what it cannot cut exactly: no
candidate cut, CUDA graph node captures (a replay is attributed where its graph
was captured, any time before), FSDP hook ranges (paired into spans across
any gap), calls or ranges without a start.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import polars as pl

from nsysmap.read.nsys import nsys_specs as specs
from nsysmap.read.nsys import nsys_sql as sql
from nsysmap.read.nsys.nsys_frames import RANGE_KINDS, nvtx_name
from nsysmap.read.nsys.nsys_probe import Export, opened
from nsysmap.read.nsys.row_window import DOMAIN_CREATE, RowWindow
from nsysmap.read.nsys.window_scans import (
    CHUNK_ROWS,
    END,
    GPU_WORK,
    CutRules,
    autograd_threads,
    call_stretches,
    counted,
    even_cuts,
    height,
    op_batches,
    scan,
)

# With more NVTX domain creations than this, windows read NVTX without rowid bounds.
MAX_DOMAINS = 256
# The NVTX reduction's kinds of rows: spans no cut may cross, autograd sequence numbers,
# flags, batch extents, domain creations, candidate cuts (lo: time, hi: ranges of the
# batch open across it) and ranges that reach past their batch's last start.
_SPAN, _SEQ, _FSDP, _NO_START, _BATCH, _DOMAIN, _NODE, _CANDIDATE, _LONG = range(9)
# ... and per CHUNK_ROWS rows (`seq`: which), the starts' extent without the rows
# that started before any range of the chunk ended (an outer range written when
# it closed), and those rows apart (read by rowid in the window of their start).
_CHUNK, _OUTLIER = 9, 10
# With more such rows than this, they widen their chunk's extent instead.
MAX_OUTLIERS = 1 << 14
# Candidate cuts kept per batch of NVTX rows: the start with the fewest of the
# batch's ranges open across it in each of this many stretches of its starts.
CANDIDATES_PER_BATCH = 512
_REDUCED = pl.Schema(
    {
        "kind": pl.Int8,
        "seq": pl.Int64,
        "lo": pl.Int64,
        "hi": pl.Int64,
        "row_lo": pl.Int64,
        "row_hi": pl.Int64,
    }
)
_NEEDED = {specs.RUNTIME.table: ("start", "correlationId"), specs.NVTX.table: ("start",)}
_NEEDED |= {s.table: ("correlationId",) for s in GPU_WORK}
_CAPTURES = (specs.GRAPH_NODE_EVENTS, specs.GRAPH_EVENTS)
# The NVTX columns the planning reads: no thread or domain id (its process is chosen in
# SQL; a fifth less time per row than every column).
_PLAN_NVTX = replace(specs.NVTX, ints="start end eventType textId")


@dataclass(frozen=True)
class Segments:
    """A process's timeline in stretches between candidate cuts.

    Stretch i holds the calls starting in [cuts[i-1], cuts[i]) (the first
    and last unbounded); `calls` has one row per stretch with calls:
    segment, calls, corr_lo, corr_hi.
    """

    cuts: list[int]
    calls: pl.DataFrame  # also row_lo, row_hi: the stretch's calls' rowids
    ops: int  # the process's rows of GPU work
    autograd: tuple[int, ...]  # the threads autograd names (their work is backward work)
    nodes: bool  # some range names an autograd node (work inside it is backward work)
    open_across: list[int]  # about how many ranges are open across each cut
    # The counts are exact (the NVTX batches' start times do not overlap): a cut with
    # none open across it needs no scan for the ranges to carry.
    exact: bool
    # Per batch of rows read: lo, hi (start times; correlation ids for GPU work) and
    # row_lo, row_hi (rowids). NVTX's is None where a window cannot bound its rowids
    # (domain creations, read in every window).
    nvtx_rows: pl.DataFrame | None = None
    domains: tuple[int, ...] = ()  # the rowids of NVTX domain creations
    outliers: pl.DataFrame | None = None  # lo (start), row_lo (rowid): read by rowid
    op_rows: dict[str, pl.DataFrame] = field(default_factory=dict)

    def window(self, calls: pl.DataFrame, start: tuple[int | None, int | None]) -> RowWindow:
        """The window of the calls starting in `start` [lo, hi) (None: unbounded), whose
        stretches are `calls`: its correlation ids, and the rowid bounds of its calls,
        of the NVTX batches that hold starts in it and of the batches of GPU work that
        hold its correlation ids."""
        corr = (_bound(calls["corr_lo"].min(), 1), _bound(calls["corr_hi"].max(), 0))
        rows = [(specs.RUNTIME.table, *_bounds(calls))]
        for table, batches in self.op_rows.items():
            overlapping = (pl.col("hi") >= corr[0]) & (pl.col("lo") <= corr[1])
            rows.append((table, *_bounds(batches.filter(overlapping))))
        nvtx, domains = None, self.domains
        if self.nvtx_rows is not None:
            lo, hi = start[0] if start[0] is not None else -END, start[1] or END
            nvtx = _bounds(self.nvtx_rows.filter((pl.col("hi") >= lo) & (pl.col("lo") < hi)))
            if self.outliers is not None:
                mine = self.outliers.filter((pl.col("lo") >= lo) & (pl.col("lo") < hi))
                domains = tuple(sorted({*domains, *mine["row_lo"].to_list()}))
        return RowWindow(*start, *corr, rows=tuple(rows), nvtx_rows=nvtx, domains=domains)


def _bound(value: object, default: int) -> int:
    """A correlation-id bound; (1, 0) reads nothing where a window has no call."""
    return value if isinstance(value, int) else default


def _bounds(rows: pl.DataFrame) -> tuple[int, int]:
    """(low, high] around the rowids row_lo..row_hi of `rows`; (0, 0) when none."""
    lo, hi = rows["row_lo"].min(), rows["row_hi"].max()
    if not isinstance(lo, int) or not isinstance(hi, int):
        return (0, 0)
    return (lo - 1, hi)


def segments(source: Export | str, pid: int, rules: CutRules) -> Segments | str:
    """The stretches of process `pid`'s timeline, or why it cannot be cut exactly."""
    export = opened(source)
    refused = _unsupported(export)
    if refused is not None:
        return refused
    strings = specs.strings_table(sql.read_table(export, specs.STRINGS))
    found = _range_spans(export, pid, strings, rules)
    if isinstance(found, str):
        return found
    candidates, (nvtx_rows, outliers), domains, nodes, exact = found
    if candidates is None:
        cuts = even_cuts(export, pid)
        candidates = pl.DataFrame({"t": cuts, "open": [0] * len(cuts)}, schema=_CANDIDATES)
    if candidates.is_empty():
        return "no moment of the capture outside every autograd link and range left open"
    calls = call_stretches(export, pid, candidates["t"].to_list())
    if calls["segment"].null_count():
        return "runtime calls without a start time"
    autograd = autograd_threads(export, pid, strings, rules)
    op_rows = op_batches(export, pid)
    ops = sum(int(batches["n"].sum()) for batches in op_rows.values())
    calls = calls.drop_nulls("segment")
    cuts, across = candidates["t"].to_list(), candidates["open"].to_list()
    return Segments(
        cuts, calls, ops, autograd, nodes, across, exact, nvtx_rows, domains, outliers, op_rows
    )


def _unsupported(export: Export) -> str | None:
    for table, columns in _NEEDED.items():
        present = {c.lower() for c in export.columns(table) or ()}
        if table == specs.RUNTIME.table and not present:
            return f"no {table} table"
        if present and any(c.lower() not in present for c in columns):
            return f"{table} lacks {', '.join(columns)}"
    for spec in _CAPTURES:
        found = sql.read_table(export, counted(spec.table, "start", ""), batch=height)
        if found is not None and found["n"].sum():
            return "CUDA graph nodes captured (replays are attributed at their capture)"
    return None


_CANDIDATES = pl.Schema({"t": pl.Int64, "open": pl.Int64})


def _range_spans(
    export: Export, pid: int, strings: pl.DataFrame, rules: CutRules
) -> tuple[pl.DataFrame | None, _Rows, tuple[int, ...], bool, bool] | str:
    """The candidate cuts (t, and about how many ranges are open across it: `open`;
    None without NVTX), the NVTX chunks' start times and rowids and the rows kept
    apart from them (None: not to bound), the rowids of its domain creations,
    whether a range names an autograd node and whether `open` is exact; or a
    refusal."""
    raised: set[int] = set()  # flags a batch has raised already: not tested for again
    reduced = scan(export, _PLAN_NVTX, lambda b: _reduced(b, strings, rules, raised), pid)
    if reduced is None:
        return None, (None, None), (), False, True  # no NVTX
    kinds = set(reduced["kind"].unique())
    if _FSDP in kinds:
        return "FSDP hook ranges (paired into spans across any gap)"
    if _NO_START in kinds:
        return "NVTX ranges without a start time"
    of = {kind: reduced.filter(pl.col("kind") == kind) for kind in (_SEQ, _SPAN, _CANDIDATE)}
    seqs = of[_SEQ].group_by("seq").agg(pl.col("lo").min(), pl.col("hi").max())
    fixed = pl.concat([of[_SPAN].select("lo", "hi"), seqs.select("lo", "hi")])
    long = reduced.filter(pl.col("kind") == _LONG)
    candidates = of[_CANDIDATE].select(
        t="lo", open=pl.col("hi") + open_across(of[_CANDIDATE]["lo"], long)
    )
    candidates = candidates.filter(open_across(candidates["t"], fixed) == 0)
    candidates = candidates.group_by("t").agg(pl.col("open").max()).sort("t")
    batches = reduced.filter(pl.col("kind") == _BATCH).select("lo", "hi", "row_lo", "row_hi")
    domains = tuple(reduced.filter(pl.col("kind") == _DOMAIN)["row_lo"].sort().to_list())
    bounded = len(domains) <= MAX_DOMAINS
    extents = batches.drop_nulls("lo").sort("lo")
    exact = bool((extents["lo"].shift(-1) > extents["hi"]).fill_null(True).all())
    kept = _chunks(reduced) if bounded else (None, None)
    return candidates.cast(_CANDIDATES), kept, domains, _NODE in kinds, exact


_Rows = tuple[pl.DataFrame | None, pl.DataFrame | None]


def _chunks(reduced: pl.DataFrame) -> _Rows:
    """The chunks' start extents and rowids (lo, hi, row_lo, row_hi) and the rows kept
    apart from them (lo, row_lo); with over MAX_OUTLIERS of those, none kept apart."""
    chunks = reduced.filter(pl.col("kind") == _CHUNK)
    outliers = reduced.filter(pl.col("kind") == _OUTLIER)
    if outliers.height > MAX_OUTLIERS:
        widest = outliers.group_by("seq").agg(first=pl.col("lo").min())
        chunks = chunks.join(widest, on="seq", how="left").with_columns(
            lo=pl.min_horizontal("lo", "first")
        )
        outliers = outliers.clear()
    return chunks.select("lo", "hi", "row_lo", "row_hi"), outliers.select("lo", "row_lo")


def open_across(times: pl.Series, spans: pl.DataFrame) -> pl.Series:
    """How many of `spans` (closed intervals lo, hi) are open across a cut at each of
    `times`: lo < t <= hi (a launch at t is inside a range ending at t)."""
    spans = spans.filter(pl.col("hi") >= pl.col("lo"))
    before = spans["lo"].sort().search_sorted(times, side="left").cast(pl.Int64)
    ended = spans["hi"].sort().search_sorted(times, side="left").cast(pl.Int64)
    return (before - ended).alias("open")


def _reduced(
    batch: pl.DataFrame, strings: pl.DataFrame, rules: CutRules, raised: set[int]
) -> pl.DataFrame:
    """A batch of NVTX rows as _REDUCED rows: the spans no cut may cross (ranges left
    open, `.item()` ranges), its sequence numbers' spans, candidate cuts, ranges
    reaching past its last start, its start times and rowids, one row when it holds
    an FSDP hook, a range without a start, a domain creation or a range naming an
    autograd node. That last is looked for only until a batch has raised it
    (`raised`, shared by the batches of one scan; the test is a regular expression
    over every range's name, a fifth of the reduction's time)."""
    extent = batch.select(
        kind=pl.lit(_BATCH),
        lo=pl.col("start").min(),
        hi=pl.col("start").max(),
        row_lo=pl.col("rowid").min(),
        row_hi=pl.col("rowid").max(),
    )
    rows = batch.filter(pl.col("eventType").is_in(RANGE_KINDS))
    rows = rows.select(lo="start", hi=pl.col("end").fill_null(END), name=nvtx_name(strings))
    chunked = batch.select("rowid", "start", hi=pl.col("end").fill_null(END)).with_columns(
        seq=pl.col("rowid") // CHUNK_ROWS
    )
    early = pl.col("start") < pl.col("hi").min().over("seq")
    outliers = chunked.filter(early).select("seq", lo="start", row_lo="rowid")
    chunks = chunked.group_by("seq").agg(
        lo=pl.col("start").filter(~early).min(),
        hi=pl.col("start").max(),
        row_lo=pl.col("rowid").min(),
        row_hi=pl.col("rowid").max(),
    )
    seqs = rows.select("lo", "hi", seq=pl.col("name").str.extract(rules.seq, 1).cast(pl.Int64))
    seqs = seqs.drop_nulls("seq").group_by("seq").agg(pl.col("lo").min(), pl.col("hi").max())
    flags = []
    if rows["name"].str.contains(rules.fsdp_hook).any():
        flags.append(_FSDP)
    if rows["lo"].null_count():
        flags.append(_NO_START)
    if _NODE not in raised and rows["name"].str.contains(rules.autograd_node).any():
        flags.append(_NODE)
        raised.add(_NODE)
    domains = batch.filter(pl.col("eventType") == DOMAIN_CREATE).select(
        kind=pl.lit(_DOMAIN), row_lo="rowid"
    )
    timed = rows.drop_nulls("lo")
    waits_read = pl.col("name").str.contains(rules.sync_range)
    fixed = timed.filter((pl.col("hi") == END) | waits_read).select("lo", "hi")
    parts = [
        domains,
        extent,
        chunks.with_columns(kind=pl.lit(_CHUNK)),
        outliers.with_columns(kind=pl.lit(_OUTLIER)),
        fixed.with_columns(kind=pl.lit(_SPAN)),
        seqs.with_columns(kind=pl.lit(_SEQ)),
        *_candidates(timed.select("lo", "hi")),
        pl.DataFrame({"kind": flags}),
    ]
    return pl.concat(
        [p.cast({c: t for c, t in _REDUCED.items() if c in p.columns}) for p in parts],
        how="diagonal",
    ).select(_REDUCED.names())


def _candidates(spans: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A batch's candidate cuts (lo: a range start, hi: how many of the batch's ranges
    that end before its last start are open across it), the fewest in each of
    CANDIDATES_PER_BATCH stretches of its starts; and its ranges reaching its last
    start or past it (counted over every batch at the end)."""
    if spans.is_empty():
        return spans.clear(), spans.clear()
    last = spans["lo"].max()
    long = spans.filter(pl.col("hi") >= last)
    starts = spans["lo"].unique().sort()
    count = open_across(starts, spans.filter(pl.col("hi") < last))
    stretch = pl.int_range(pl.len(), dtype=pl.Int64) * CANDIDATES_PER_BATCH // pl.len()
    best = (
        pl.DataFrame({"lo": starts, "hi": count})
        .group_by(stretch.alias("s"))
        .agg(pl.col("lo").get(pl.col("hi").arg_min()), pl.col("hi").min())
    )
    return (
        best.select("lo", "hi", kind=pl.lit(_CANDIDATE)),
        long.with_columns(kind=pl.lit(_LONG)),
    )
