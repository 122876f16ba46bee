"""The ranges of a profile as attribution searches them: positions, families, labels.

A `Scope` is built once per profile (`Scope.of`): which ranges belong to the
step, phase, module, warm-up and autograd families (their names parsed once
per distinct name), and the ranges in nesting pre-order
(nsysmap.intervals.preorder) when they form a proper forest, which
`nsysmap.attribution.locate` searches and by_range reads
(nsysmap.summaries.by_range) rather than sorting them again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from nsysmap.attribution.labels import LABELS, autograd_nodes, may_name_scope, name_labels
from nsysmap.attribution.rules import BUILTIN, WARMUP, NameRules
from nsysmap.core.scalars import to_int
from nsysmap.intervals.forest import Forest, group_index, positions
from nsysmap.intervals.preorder import Preorder

SCOPE_FAMILIES = {"step": "lbl_step", "phase": "lbl_phase", "module": "lbl_module"}
# Warm-up ranges (names the rules mark `warmup`) are looked up as a family of
# their own: an operation inside one is warm-up work whatever its phase.
WINDOW_FAMILIES = ("step", "phase", WARMUP)
# Ranges of autograd's nodes (labels.AUTOGRAD_NODE): backward work, whatever the phase.
AUTOGRAD = "autograd"
# Columns of `locate`: range positions (UInt32, null when none) and `projected`.
# `other`: the innermost of the step, phase and warm-up ranges taken from another thread.
ANCHORS = ("inner", "step", "phase", WARMUP, "module", "aten", "seq_module", "other", AUTOGRAD)
# The families whose innermost range at a launch is looked up (the module family first:
# `Scope.around` finds it alone for the autograd sequence links).
FAMILIES = ("module", "step", "phase", WARMUP, AUTOGRAD)


@dataclass
class Scope:
    """Nested ranges by position, and the labels of names that may give a scope.

    Those names repeat (the same module ranges every step), so their labels
    are kept once per distinct name: `name_at` holds, per range position, the
    index of its name in `table` (null: a name that gives no scope), so that a
    lookup is two gathers.

    `preorder` (nsysmap.intervals.preorder) is the ranges in nesting pre-order,
    when they form a proper forest: then each family's innermost range at an
    operation's launch is the family's nearest range around the innermost one
    (`nearest`, found once per range), and `forest` (lookups by as-of joins
    and climbs) is built only where something still asks for it.
    """

    ranges: pl.DataFrame
    thread: pl.Series  # per range: its thread's code
    name_at: pl.Series  # per range: index into table (UInt32), null when not scoped
    table: pl.DataFrame  # LABELS per distinct name
    members: dict[str, pl.Series]  # family -> Boolean per range
    preorder: Preorder | None = None
    families: np.ndarray | None = None  # per range: bit f set when in FAMILIES[f]
    _forest: Forest | None = None
    _parent: pl.Series | None = None

    @classmethod
    def of(cls, ranges: pl.DataFrame, thread: pl.Series, rules: NameRules = BUILTIN) -> Scope:
        """The scope of `ranges`, whose step and phase names `rules` read."""
        names = ranges["name"]
        frame = pl.DataFrame({"name": names})
        maybe = frame.select(may_name_scope(pl.col("name"), rules)).to_series()
        pos = maybe.arg_true()
        code = names.gather(pos).cast(pl.Categorical).to_physical()
        distinct = pl.DataFrame({"code": code}).with_row_index("first").unique("code").sort("code")
        table = name_labels(names.gather(pos.gather(distinct["first"])), rules=rules)
        name = distinct["code"].search_sorted(code)  # of each scoped range, into table
        name_at = pl.repeat(None, ranges.height, dtype=name.dtype, eager=True).scatter(pos, name)
        found = {f: table[label].is_not_null() for f, label in SCOPE_FAMILIES.items()}
        found[WARMUP] = table["lbl_warmup"].fill_null(False)
        members = {}
        for family, hit_names in found.items():
            hit = pos.filter(hit_names.gather(name))
            members[family] = pl.repeat(False, ranges.height, eager=True).scatter(hit, True)
        members[AUTOGRAD] = autograd_nodes(names)
        scope = cls(ranges, thread, name_at, table, members)
        scope.preorder = preorder_of(ranges, thread)
        if scope.preorder is not None:
            bits = [pl.lit(members[f]).cast(pl.UInt8) * (1 << i) for i, f in enumerate(FAMILIES)]
            scope.families = pl.select(pl.sum_horizontal(bits)).to_series().to_numpy()
        return scope

    def around(self, rows: np.ndarray, count: int = 5) -> dict[str, pl.Series]:
        """Per row (found by `preorder`), the innermost range around it of each of the
        first `count` families of FAMILIES (the module family first)."""
        pre, families = self.preorder, self.families
        assert pre is not None and families is not None
        found = pre.around(rows, families, count)
        return {f: pre.rows(near) for f, near in zip(FAMILIES, found, strict=False)}

    @property
    def forest(self) -> Forest:
        """The ranges as a `Forest` (built on first use)."""
        if self._forest is None:
            self._forest = Forest.of(self.ranges, self.thread, "range_id")
        return self._forest

    @property
    def parent(self) -> pl.Series:
        """Each range's parent position (UInt32, null at the top), made on first use and
        kept: every chunk of operations asks for it (at 10^7 kernels, 41 chunks each
        converting 2.9·10^7 parents took 13 CPU s)."""
        if self._parent is None:
            if self.preorder is not None:
                self._parent = self.preorder.rows(self.preorder.parent[:-1])
            else:
                self._parent = self.forest.parent
        return self._parent

    def label(self, positions: pl.Series, column: str) -> pl.Series:
        """`column` of LABELS at `positions` (which must be scoped names, or null)."""
        return self.labels(positions, [column])[column]

    def labels(self, positions: pl.Series, columns: list[str]) -> dict[str, pl.Series]:
        """Some LABELS columns at `positions` (scoped names, or null), looked up once."""
        if self.table.is_empty():
            return {
                c: pl.repeat(None, positions.len(), dtype=LABELS[c], eager=True) for c in columns
            }
        name = self.name_at.gather(positions)
        return {c: self.table[c].gather(name) for c in columns}

    def names_match(self, pattern: str) -> Callable[[pl.Series], pl.Series]:
        """A test on positions: does the range's name match `pattern`?"""
        names = self.ranges["name"]
        return lambda pos: names.gather(pos).str.contains(pattern)

    def rows_match(self, pattern: str) -> Callable[[np.ndarray], np.ndarray]:
        """`names_match` on rows as NumPy positions (null names never match)."""
        names = self.ranges["name"]
        return lambda rows: names.gather(rows).str.contains(pattern).fill_null(False).to_numpy()


def preorder_of(ranges: pl.DataFrame, thread: pl.Series) -> Preorder | None:
    """The ranges in nesting pre-order (nsysmap.intervals.preorder), or None."""
    if not ranges.height:
        return None
    parent = positions(ranges["range_id"], ranges["parent_id"])
    n_threads = to_int(thread.max() or 0) + 1
    return Preorder.of(
        thread,
        n_threads,
        ranges["start_ns"],
        ranges["end_ns"],
        ranges["range_id"],
        parent,
        ranges["depth"],
    )


def thread_keys(ranges: pl.DataFrame, ops: pl.DataFrame) -> tuple[pl.Series, pl.Series] | None:
    """One code per (pid, tid), shared by ranges and launching threads (null: no thread)."""
    both = pl.concat(
        [ranges.select("pid", "tid"), ops.select("pid", "tid").drop_nulls()], how="vertical"
    )
    codes = group_index(both, ["pid", "tid"])
    if codes is None:
        return None
    code, _ = codes
    op_codes = pl.repeat(None, ops.height, dtype=pl.UInt32, eager=True)
    launched = ops.select(pl.col("tid").is_not_null() & pl.col("pid").is_not_null()).to_series()
    op_codes = op_codes.scatter(launched.arg_true(), code.slice(ranges.height))
    return code.slice(0, ranges.height), op_codes
