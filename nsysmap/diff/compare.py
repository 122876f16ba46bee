"""Two runs side by side: time per step by phase, module, category and kernel (pure).

Each run's time is normalised per step: the operations inside steps, divided
by the run's number of steps (one step on one device, as in `nsysmap
report`). Operations placed in their run's structure (`nsysmap diff` places
them: nsysmap.report.answers.placed_run) take the steps of its measured
region, as the report and the findings count them; a run without steps
counts that region as one step. Operations not placed take the steps their
labels name, and a run without step labels counts its whole capture.
Rows are matched by name (phase, module path, category, full kernel name);
a row found in one run only is kept with `match` `only_a` / `only_b` and 0
for the other run, so every level adds up to each run's time per step:

    change        = b − a                       (ns per step)
    change_ratio  = change / a                  (null when a is 0)
    change_share  = change / (total b − total a) (null when the totals are equal)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

from nsysmap.report import scope_tables as rt
from nsysmap.report.answers import RunData, placed_run
from nsysmap.report.scopes import describe

LEVELS = {  # level -> (key column of ops.parquet, label column)
    "phase": ("phase", "phase"),
    "module": ("module", "module_class"),
    "category": ("category", "category"),
    "kernel": ("name", "short_name"),
}
OUTSIDE = {
    "phase": "(outside every phase)",
    "module": "(outside every module)",
    "category": "(none)",
    "kernel": "(none)",
}
DIFF = pl.Schema(
    {
        "level": pl.String,  # phase, module, category, kernel
        "key": pl.String,  # phase, module path, category or full kernel name; null: none
        "label": pl.String,  # how the row is shown: the module's class, the kernel's short name
        "match": pl.String,  # both, only_a, only_b
        "a_ns_per_step": pl.Float64,
        "b_ns_per_step": pl.Float64,
        "change_ns_per_step": pl.Float64,
        "change_ratio": pl.Float64,
        "change_share": pl.Float64,
    }
)


@dataclass(frozen=True)
class Side:
    """One run as the diff sees it."""

    label: str
    ops: pl.DataFrame  # operations of the step scope (the measured region, or by labels)
    steps: int | None  # the scope's steps (per device, or device and process); None: none
    scope: str = ""  # what one step of the run is, in words
    note: str | None = None  # how its structure was had, where not from structure.parquet

    @property
    def divisor(self) -> int:
        return self.steps or 1

    @property
    def per_step_ns(self) -> float:
        return float(self.ops["dur_ns"].sum()) / self.divisor


def side(label: str, ops: pl.DataFrame, structure: pl.DataFrame | None = None) -> Side:
    """The operations and step count of one run; `structure`: the run's, where `ops`
    are placed in it."""
    inside = rt.scope_filter(ops, "step")
    steps = rt.passes(inside)  # the measured steps, not those of the warm-up
    if structure is not None and "s_region" in ops.columns:
        scope = describe(ops, structure, "step")["label"]
    else:
        scope = f"{steps:,} step{'' if steps == 1 else 's'}" if steps else NO_STEPS
    return Side(label, inside, steps, scope)


NO_STEPS = "no step ranges (whole capture)"


def level_rows(level: str, a: Side, b: Side) -> pl.DataFrame:
    """DIFF rows of one level, largest absolute change first."""
    key, label = LEVELS[level]

    def times(s: Side, name: str) -> pl.DataFrame:
        return s.ops.group_by(pl.col(key).alias("key")).agg(
            (pl.col("dur_ns").sum() / s.divisor).alias(name),
            pl.col(label).drop_nulls().first().alias(f"label_{name}"),
        )

    joined = times(a, "a").join(
        times(b, "b"), on="key", how="full", coalesce=True, nulls_equal=True
    )
    total = b.per_step_ns - a.per_step_ns
    change = pl.col("b_ns_per_step") - pl.col("a_ns_per_step")
    out = joined.with_columns(
        level=pl.lit(level),
        label=pl.coalesce("label_a", "label_b", "key", pl.lit(OUTSIDE[level])),
        match=pl.when(pl.col("a").is_null())
        .then(pl.lit("only_b"))
        .when(pl.col("b").is_null())
        .then(pl.lit("only_a"))
        .otherwise(pl.lit("both")),
        a_ns_per_step=pl.col("a").fill_null(0.0),
        b_ns_per_step=pl.col("b").fill_null(0.0),
    ).with_columns(
        change_ns_per_step=change,
        change_ratio=pl.when(pl.col("a_ns_per_step") != 0).then(change / pl.col("a_ns_per_step")),
        change_share=pl.when(change == 0).then(0.0).otherwise(change / total)
        if total
        else pl.lit(None, pl.Float64),
    )
    if level == "module":  # the root module "" is shown by its class; outside modules by OUTSIDE
        out = out.with_columns(
            label=pl.when(pl.col("key").is_null()).then(pl.lit(OUTSIDE[level])).otherwise("label")
        )
    ordered = out.sort(
        [pl.col("change_ns_per_step").abs(), "key"], descending=[True, False], nulls_last=True
    )
    return ordered.select(DIFF.names()).cast(DIFF)


@dataclass(frozen=True)
class Diff:
    """The whole comparison: both sides and one DIFF frame per level."""

    a: Side
    b: Side
    levels: dict[str, pl.DataFrame]

    def table(self) -> pl.DataFrame:
        """Every level in one DIFF frame (what `diff -o` writes as diff.parquet)."""
        return pl.concat(list(self.levels.values()))

    @property
    def change_ns(self) -> float:
        return self.b.per_step_ns - self.a.per_step_ns

    @property
    def notes(self) -> list[str]:
        """How each run's structure was had, where not from its structure.parquet."""
        return [f"{x}: {s.note}" for x, s in (("A", self.a), ("B", self.b)) if s.note]


def compare(label_a: str, ops_a: pl.DataFrame, label_b: str, ops_b: pl.DataFrame) -> Diff:
    """Compare two runs' ops tables at every level, their steps those their labels name."""
    return _diff(side(label_a, ops_a), side(label_b, ops_b))


def compare_runs(label_a: str, a: RunData, label_b: str, b: RunData) -> Diff:
    """Compare two runs read from their folders, each placed in its structure (found
    again, and said so, where a folder has no structure.parquet)."""
    return _diff(_placed_side(label_a, a), _placed_side(label_b, b))


def _placed_side(label: str, run: RunData) -> Side:
    """The run's side over the steps of its structure. Only the columns the levels and
    the structure's scope read are placed (a run found again keeps every column, which
    finding its structure reads)."""
    if run.structure is not None:
        run = replace(run, ops=run.ops.select(c for c in run.ops.columns if c in _READ))
    placed = placed_run(run)
    return replace(side(label, placed.ops, placed.structure), note=run.structure_note)


def _diff(a: Side, b: Side) -> Diff:
    return Diff(a, b, {level: level_rows(level, a, b) for level in LEVELS})


# What a placed side reads: the levels' keys and labels, the times, and what places an
# operation in its structure (nsysmap.structure.table.assign) and picks its scope.
_READ = frozenset(
    [c for pair in LEVELS.values() for c in pair]
    + ["op_id", "device_id", "pid", "launch_start_ns", "start_ns", "dur_ns"]
    + ["step", "warmup", "kind", "direction"]
)


def biggest(diff: Diff, level: str) -> dict | None:
    """The row of a level with the largest absolute change (None when nothing changed)."""
    rows = diff.levels[level].filter(pl.col("change_ns_per_step") != 0)
    return None if rows.is_empty() else rows.row(0, named=True)
