"""`build_structure`: the STRUCTURE table of a profile, from its operations, ranges and
inferred labels (pure).

Passes first (nsysmap.structure.evidence: labels, phase ranges, records, the
kernel sequence), then the steps that hold them (step labels, a range
holding one forward and one backward pass, an inferred training step), then
the regions of each process from where its passes lie
(nsysmap.structure.regions); every row's operations, time and GPU span last,
counted as nsysmap.structure.table.assign puts operations in rows.

`build_structure` reads one frame of operations; `structure_in_parts` the same
operations a process (or a few whole processes) at a time, for rows streamed
to ops.parquet. Only pass rows, steps and per-process spans cross from one part
to the next, and every part is read twice (its evidence, then its counts), so
that only one part's operations are in memory at a time; the table is the same
either way::

    part 1 ─> base ─> passes, steps, lanes ─┐                ┌─> counts 1 ─┐
    part 2 ─> base ─> passes, steps, lanes ─┴─> regions, ... ┼─> counts 2 ─┴─> STRUCTURE
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

import polars as pl

from nsysmap.attribution.rules import BUILTIN, NameRules
from nsysmap.structure import evidence as found
from nsysmap.structure.overlaps import overlapping
from nsysmap.structure.ranges import SLIM, labelled
from nsysmap.structure.regions import Regions, grouped, regions
from nsysmap.structure.table import _NO_DEVICE, REGIONS, STRUCTURE, held_rows, launched_at

# The OPS columns the structure reads (with the inferred labels, when there are some).
OPS_COLUMNS = (
    "op_id",
    "device_id",
    "pid",
    "start_ns",
    "end_ns",
    "dur_ns",
    "launch_start_ns",
    "step",
    "step_source",
    "phase",
    "phase_source",
    "warmup",
)
INFERRED_COLUMNS = ("op_id", "inferred_step", "inferred_phase", "inferred_confidence")


# The OPS columns the structure counts each row's operations from (a second read).
COUNTED_COLUMNS = (
    "device_id",
    "pid",
    "launch_start_ns",
    "start_ns",
    "end_ns",
    "dur_ns",
    "step",
    "phase",
)
# The operations of one or more whole processes at a time, of the columns asked for;
# called once per read, giving the same parts each time.
Parts = Callable[[tuple[str, ...]], Iterable[pl.DataFrame]]


def build_structure(
    ops: pl.DataFrame,
    ranges: pl.DataFrame | None = None,
    inferred: pl.DataFrame | None = None,
    rules: NameRules = BUILTIN,
    measure: tuple[str, ...] = (),
) -> pl.DataFrame:
    """STRUCTURE of `ops` (OPS_COLUMNS), their profile's SLIM `ranges` and INFERRED labels."""
    return structure_in_parts(
        lambda columns: [ops.select(columns)], ranges, inferred, rules, measure
    )


def structure_in_parts(
    parts: Parts,
    ranges: pl.DataFrame | None = None,
    inferred: pl.DataFrame | None = None,
    rules: NameRules = BUILTIN,
    measure: tuple[str, ...] = (),
) -> pl.DataFrame:
    """STRUCTURE of the operations `parts` gives (whole processes each), their profile's
    SLIM `ranges` and INFERRED labels: that of all the operations at once."""
    named = labelled(ranges if ranges is not None else pl.DataFrame(schema=SLIM), rules)
    found = []
    for ops in parts(OPS_COLUMNS):
        found.append(_evidence(_base(ops, inferred), named))
        del ops  # one part's operations in memory at a time
    if not found:  # no operations: no region, step or pass
        return pl.DataFrame(schema=STRUCTURE)
    evidence = _Evidence.joined(found)
    passes, steps = _passes_and_steps(evidence, named)
    if passes.is_empty():
        return _finished(parts, _whole(evidence.lanes), passes, steps)
    placed = grouped(passes, named)
    bounds = regions(placed, measure)
    rows = _region_rows(evidence.lanes, bounds, named)
    return _finished(parts, rows, placed.drop("span"), steps)


def _base(ops: pl.DataFrame, inferred: pl.DataFrame | None) -> pl.DataFrame:
    """One row per operation: `dev` (null as a stand-in value), `at` (launched), labels."""
    base = ops.select(OPS_COLUMNS).with_columns(
        dev=pl.col("device_id").fill_null(_NO_DEVICE), at=launched_at()
    )
    if inferred is not None and not inferred.is_empty():
        # The inferred labels alone are joined, then set beside the operations' columns
        # (a join of `base` itself would copy every column of every operation).
        labels = base.select("op_id").join(
            inferred.select(INFERRED_COLUMNS), on="op_id", how="left", maintain_order="left"
        )
        base = base.hstack(labels.drop("op_id").get_columns())
    return base


@dataclass(frozen=True)
class _Evidence:
    """What the structure keeps of a part's operations: the passes and steps their labels,
    phase ranges and records give, their inferred passes, and each device and process's
    first and last launch (`lanes`)."""

    kept: pl.DataFrame
    label_steps: pl.DataFrame
    inferred: pl.DataFrame
    lanes: pl.DataFrame

    @staticmethod
    def joined(parts: list[_Evidence]) -> _Evidence:
        if len(parts) == 1:
            return parts[0]
        return _Evidence(
            *(pl.concat([getattr(p, f.name) for p in parts]) for f in fields(_Evidence))
        )


def _evidence(base: pl.DataFrame, named: pl.DataFrame) -> _Evidence:
    """The step labels' passes and steps first; the operations outside every labelled
    step then read by their phase ranges and records; the inferred passes."""
    label_passes, label_steps = found.labelled_steps(base)
    labelled = base["step"].is_not_null()
    rest = base.filter(~labelled) if labelled.any() else base  # no copy of unlabelled ops
    inferred = found.inferred_passes(base)
    kept = _added(label_passes, found.phase_ranges(rest, named, inferred), "direction")
    kept = _added(kept, found.records(rest, kept), "direction")
    lanes = base.group_by("dev", "pid").agg(first=pl.col("at").min(), last=pl.col("at").max())
    return _Evidence(kept, label_steps, inferred, lanes)


def _passes_and_steps(
    evidence: _Evidence, named: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Every pass, from each kind of evidence in turn (the kernel sequence's last, with
    the ranges that repeat in every forward pass of every process), and the steps that
    hold them: the step labels', a range's, the kernel sequence's."""
    kept = evidence.kept
    passes = pl.concat([kept, found.fill(evidence.inferred, kept, named)])
    loose = passes.filter(~pl.col("origin").str.starts_with("step:"))
    steps = _added(evidence.label_steps, found.range_steps(loose, named))
    return passes, _added(steps, found.inferred_steps(loose))


def _added(kept: pl.DataFrame, more: pl.DataFrame, by: str | None = None) -> pl.DataFrame:
    """`kept` and those of `more` that overlap none of them (same device and process, and
    `by`): rows of one kind never overlap, and earlier evidence wins."""
    on = ["dev", "pid", *([by] if by else [])]
    return pl.concat([kept, more.filter(~overlapping(more, kept, on))])


def _rows(frame: pl.DataFrame, kind: str) -> pl.DataFrame:
    """Candidates (or regions) as STRUCTURE rows of `kind`, numbered in their order."""
    filled = {c: pl.lit(None, t) for c, t in STRUCTURE.items() if c not in frame.columns}
    return (
        frame.with_columns(**filled)
        .with_columns(
            device_id=pl.col("dev"),
            kind=pl.lit(kind),
            index=pl.int_range(pl.len(), dtype=pl.Int64),
        )
        .select(STRUCTURE.names())
        .cast(STRUCTURE)
    )


def _whole(lanes: pl.DataFrame) -> pl.DataFrame:
    """No pass anywhere: each process is one measured region, the whole capture."""
    return lanes.rename({"first": "start_ns", "last": "end_ns"}).with_columns(
        region=pl.lit("measured"), evidence=pl.lit("position"), confidence=pl.lit(1.0)
    )


def _region_rows(lanes: pl.DataFrame, bounds: list[Regions], named: pl.DataFrame) -> pl.DataFrame:
    """Set-up, warm-up, measured and tail of each device of each process (`lanes`: its
    first and last launch)."""
    rows = []
    for b in bounds:
        for lane in lanes.filter(pl.col("pid") == b.pid).iter_rows(named=True):
            low, high = min(lane["first"], b.first), max(lane["last"], b.end)
            spans = {
                "setup": (
                    low,
                    b.first - 1,
                    _setup_name(named, b.pid, low, b.first),
                    "position",
                    1.0,
                ),
                "warmup": (b.first, b.start - 1, b.warm_name, b.warm_evidence, 1.0),
                "measured": (b.start, b.end, b.name, b.evidence, b.confidence),
                "tail": (b.end + 1, high, None, "position", 1.0),
            }
            for region, (start, end, name, evidence, confidence) in spans.items():
                if start <= end:
                    rows.append(
                        (lane["dev"], b.pid, region, start, end, name, evidence, confidence)
                    )
    columns = ["dev", "pid", "region", "start_ns", "end_ns", "name", "evidence", "confidence"]
    return pl.DataFrame(rows, schema=columns, orient="row")


def _setup_name(named: pl.DataFrame, pid: int, start: int, end: int) -> str | None:
    """The longest outermost range that ends in the set-up, if one does."""
    inside = named.filter(
        (pl.col("pid") == pid)
        & (pl.col("depth") == 1)
        & (pl.col("end_ns") >= start)
        & (pl.col("end_ns") < end)
    )
    if inside.is_empty():
        return None
    longest = inside.sort(
        pl.col("end_ns") - pl.col("start_ns"), pl.col("name"), descending=[True, False]
    )
    return str(longest["name"][0])  # of two as long, the first by name: one answer every run


def _region_of(rows: pl.DataFrame, regions_: pl.DataFrame) -> pl.DataFrame:
    """`rows` (steps or passes) with the region their start lies in."""
    if rows.is_empty():
        return rows.with_columns(region=pl.lit(None, pl.String))
    spans = regions_.select("dev", "pid", r_start="start_ns", r_end="end_ns", region="region")
    return _last_started(rows, spans, "r_start").drop("r_start", "r_end")


def _last_started(rows: pl.DataFrame, spans: pl.DataFrame, start: str) -> pl.DataFrame:
    """`rows` with the columns of the span of their device and process that started last
    at or before each row's start (its start in column `start`)."""
    return rows.sort("start_ns").join_asof(
        spans.sort(start),
        left_on="start_ns",
        right_on=start,
        by=["dev", "pid"],
        check_sortedness=False,
    )


def _finished(
    parts: Parts, region_rows: pl.DataFrame, passes: pl.DataFrame, steps: pl.DataFrame
) -> pl.DataFrame:
    """The STRUCTURE table: rows numbered in time order, steps given to passes, and each
    row's operations, time and GPU span."""
    steps = _region_of(steps, region_rows)
    passes = _region_of(passes, region_rows)
    passes = _in_steps(passes, steps)
    table = pl.concat(
        [
            _rows(_ordered(region_rows), "region"),
            _rows(_ordered(steps), "step"),
            _rows(_ordered(passes), "pass"),
        ]
    )
    table = table.with_columns(
        index=pl.int_range(pl.len(), dtype=pl.Int64).over("device_id", "pid", "kind")
    )
    return _counted(parts, table)


def _ordered(frame: pl.DataFrame) -> pl.DataFrame:
    order = {r: i for i, r in enumerate(REGIONS)}
    if "region" in frame.columns and "direction" not in frame.columns:
        frame = frame.with_columns(_o=pl.col("region").replace_strict(order, default=9))
        return frame.sort("dev", "pid", "start_ns", "_o").drop("_o")
    return frame.sort("dev", "pid", "start_ns")


def _in_steps(passes: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """`passes` with `step_index`: the index of the step (in `_ordered` order, per device
    and process) whose span holds the pass's start."""
    if passes.is_empty() or steps.is_empty():
        return passes.with_columns(step_index=pl.lit(None, pl.Int64))
    numbered = _ordered(steps).with_columns(
        step_index=pl.int_range(pl.len(), dtype=pl.Int64).over("dev", "pid")
    )
    spans = numbered.select("dev", "pid", "step_index", s_start="start_ns", s_end="end_ns")
    joined = _last_started(passes, spans, "s_start")
    inside = pl.col("start_ns") <= pl.col("s_end")
    joined = joined.with_columns(step_index=pl.when(inside).then("step_index"))
    return joined.drop("s_start", "s_end")


def _counted(parts: Parts, table: pl.DataFrame) -> pl.DataFrame:
    """`table` with each row's ops, time_ns, gpu_start_ns and gpu_end_ns; regions without
    operations left out; device ids null where the operations have none.

    Each operation is counted in the rows that hold it (nsysmap.structure.table), found
    as row positions and summed by position, a part at a time (a row's operations are
    of one process: in one part)."""
    sums = []
    for ops in parts(COUNTED_COLUMNS):
        sums.append(_sums(ops, table))
        del ops
    counted = sums[0] if len(sums) == 1 else pl.concat(sums)
    rows = table.drop("ops", "time_ns", "gpu_start_ns", "gpu_end_ns").with_row_index("_pos")
    joined = rows.join(counted, on="_pos", how="left", maintain_order="left")
    joined = joined.with_columns(pl.col("ops", "time_ns").fill_null(0))
    done = joined.filter((pl.col("kind") != "region") | (pl.col("ops") > 0))
    done = done.select(STRUCTURE.names()).cast(STRUCTURE)
    return done.with_columns(device_id=pl.when(pl.col("device_id") != _NO_DEVICE).then("device_id"))


def _sums(ops: pl.DataFrame, table: pl.DataFrame) -> pl.DataFrame:
    """Per row of `table` (`_pos`: its position) holding some of `ops` (COUNTED_COLUMNS),
    their count, summed duration, first start and last end."""
    lanes = ops.select(
        "pid",
        "launch_start_ns",
        "start_ns",
        "step",
        "phase",
        device_id=pl.col("device_id").fill_null(_NO_DEVICE),
    )
    held = held_rows(lanes, table)
    values = ops.select("dur_ns", "start_ns", "end_ns")
    sums = (
        pl.len().cast(pl.Int64).alias("ops"),
        pl.col("dur_ns").sum().alias("time_ns"),
        pl.col("start_ns").min().alias("gpu_start_ns"),
        pl.col("end_ns").max().alias("gpu_end_ns"),
    )
    return pl.concat(
        [values.with_columns(_pos=held[kind]).group_by("_pos").agg(*sums) for kind in held.columns]
    ).drop_nulls("_pos")
