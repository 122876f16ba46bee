"""The ranges the structure model reads, and what their names say (pure).

Of a profile's ranges, those that can name or hold a region, step or pass:
not PyTorch's operator ranges, not nsysmap's module ranges, at most MAX_DEPTH
deep. Each is read with the run's name rules (the phase, step or warm-up mark
it gives, as attribution reads it) and gets a `key`: its name with every
number as `#` (`warmup_iter_3` and `warmup_iter_4` are instances of one
`warmup_iter_#`)::

    range                    phase     warmup  key
    warm_up                  -         true    warm_up
    warm_up > warmup_iter_0  -         true    warmup_iter_#
    ... > fwd                forward   -       fwd
"""

from __future__ import annotations

import polars as pl

from nsysmap.attribution.labels import name_labels, operator_ranges
from nsysmap.attribution.rules import NameRules

MAX_DEPTH = 6
_MODULE_RANGES = ("nsysmap:fwd:", "nsysmap:bwd:")
# The ranges kept by the flow for the structure model (a few columns of RANGES).
SLIM = pl.Schema(
    {
        "range_id": pl.Int64,
        "pid": pl.Int64,
        "tid": pl.Int64,
        "name": pl.String,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "depth": pl.Int32,
    }
)
_LAST = 2**62  # an end for ranges left open at the end of the capture


def slim_ranges(ranges: pl.DataFrame) -> pl.DataFrame:
    """The ranges that can name or hold a region, step or pass (SLIM).

    The cheap tests first (process, depth, nsysmap's module prefixes), on every
    range; the operator test on those left.
    """
    name = pl.col("name")
    module = pl.any_horizontal(name.str.starts_with(prefix) for prefix in _MODULE_RANGES)
    kept = ranges.filter(
        pl.col("pid").is_not_null() & (pl.col("depth") <= MAX_DEPTH) & name.is_not_null() & ~module
    )
    kept = kept.filter(~operator_ranges(kept["name"]))
    return kept.select(SLIM.names()).cast(SLIM)


def ranges_from_ops(ops: pl.DataFrame) -> pl.DataFrame:
    """SLIM ranges as far as the operations tell them (an output without the profile's
    ranges): each operation's innermost range, from its first launch to its last. Ranges
    around others, and those whose operations all lie deeper, are not seen."""
    if "range_id" not in ops.columns:
        return pl.DataFrame(schema=SLIM)
    at = pl.coalesce("launch_start_ns", "start_ns")
    found = (
        ops.filter(pl.col("range_id").is_not_null())
        .group_by("pid", "range_id")
        .agg(
            pl.col("tid").drop_nulls().first(),
            pl.col("range_name").first().alias("name"),
            at.min().alias("start_ns"),
            at.max().alias("end_ns"),
            pl.col("range_depth").first().alias("depth"),
        )
    )
    return slim_ranges(found.with_columns(pl.col("tid").fill_null(-1)))


def merged(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """The SLIM ranges of several parts of one profile (its processes or time windows):
    a range read into two windows (under one id) once, from its first start to last end."""
    if not parts:
        return pl.DataFrame(schema=SLIM)
    if len(parts) == 1:
        return parts[0]
    every = pl.concat(parts)
    return (
        every.group_by("pid", "range_id", maintain_order=True)
        .agg(
            pl.col("tid", "name", "depth").first(),
            pl.col("start_ns").min(),
            pl.col("end_ns").max(),
        )
        .select(SLIM.names())
    )


def labelled(ranges: pl.DataFrame, rules: NameRules) -> pl.DataFrame:
    """SLIM ranges with what their names say: `phase`, `warmup`, `step` (as the name
    rules read them), `call` (a root module's call's direction), `key` (numbers as #),
    `outermost` (no range of the same phase around it on its thread), `outer_call` (no
    call of a module in the same direction around it); ends filled (open: to the end),
    sorted by start."""
    names = ranges["name"].unique().drop_nulls()
    columns = ["lbl_phase", "lbl_step", "lbl_warmup", "lbl_module", "lbl_direction"]
    labels = pl.concat([names.to_frame(), name_labels(names, columns, rules)], how="horizontal")
    # numbers as #, once per distinct name (the ranges repeat a few thousand names)
    labels = labels.with_columns(_key=pl.col("name").str.replace_all(r"\d+", "#"))
    done = ranges.join(labels, on="name", how="left").with_columns(
        pl.col("start_ns").fill_null(0),
        pl.col("end_ns").fill_null(_LAST),
        phase=pl.col("lbl_phase"),
        warmup=pl.col("lbl_warmup").fill_null(False),
        step=pl.col("lbl_step"),
        # a root module's call (not a submodule's: `blocks.3` is a layer, not a pass)
        call=pl.when(
            pl.col("lbl_module").is_not_null()
            & ~pl.col("lbl_module").str.contains(".", literal=True)
        ).then(pl.col("lbl_direction")),
        key=pl.col("_key"),
    )
    done = done.sort("pid", "tid", "start_ns", pl.col("end_ns"), descending=[False] * 3 + [True])
    return (
        done.with_columns(outermost=_outermost("phase"), outer_call=_outermost("call"))
        .drop(*columns, "_key")
        .sort("start_ns")
    )


def _outermost(label: str) -> pl.Expr:
    """A range with `label` set that lies in no range of the same `label` on its thread
    (ranges sorted by thread, start and longest first)."""
    before = pl.col("end_ns").cum_max().shift(1).over("pid", "tid", label)
    return pl.col(label).is_not_null() & (before.is_null() | (before < pl.col("end_ns")))


def containing(spans: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """For each span (`span`, pid, start_ns, end_ns) every range of its process that holds
    it whole: span, range_id, name, key, phase, warmup, start and end (`r_start_ns`,
    `r_end_ns`), depth; outermost first (HELD_ORDER).

    Ranges of one thread and depth never overlap, so per thread and depth the one
    range that can hold a span is the last to start by the span's start (an as-of
    join): a few joins, whatever the number of spans and ranges.
    """
    if spans.is_empty() or ranges.is_empty():
        return pl.DataFrame(schema=_CONTAINING)
    columns = ["range_id", "name", "key", "phase", "warmup", "depth"]
    held = []
    for (depth,), level in ranges.group_by("depth"):
        candidates = level.select(
            "pid", "tid", *columns[:-1], r_start_ns="start_ns", r_end_ns="end_ns"
        ).with_columns(depth=pl.lit(depth, pl.Int32))
        threads = candidates.select("pid", "tid").unique()
        asked = spans.select("span", "pid", "start_ns", "end_ns").join(threads, on="pid")
        found = asked.sort("start_ns").join_asof(
            candidates.sort("r_start_ns"),
            left_on="start_ns",
            right_on="r_start_ns",
            by=["pid", "tid"],
            check_sortedness=False,
        )
        held.append(found.filter(pl.col("end_ns") <= pl.col("r_end_ns")))
    every = pl.concat(held) if held else pl.DataFrame(schema=_CONTAINING)
    return every.sort(HELD_ORDER).select(_CONTAINING.names())


# The order of `containing`'s rows: outermost first, then by what the ranges say, so that
# ranges of two threads with the same start and depth come in one order whatever the
# order they were read in (their ids differ between a whole read and one in parts).
HELD_ORDER = ("span", "r_start_ns", "depth", "name", "r_end_ns")


_CONTAINING = pl.Schema(
    {
        "span": pl.Int64,
        "range_id": pl.Int64,
        "name": pl.String,
        "key": pl.String,
        "phase": pl.String,
        "warmup": pl.Boolean,
        "r_start_ns": pl.Int64,
        "r_end_ns": pl.Int64,
        "depth": pl.Int32,
    }
)
