"""Where each operation's launch lies among the ranges: positions, not yet names.

`locate` answers, for every launched operation, the positions (rows of
`profile.ranges`) of the innermost range on the launching thread, of the
innermost step, phase, module and operator range, of the step / phase range
of the process when the thread has none, and of the module found through
the autograd sequence number (see `nsysmap.attribution.attribute` for the rules). Names
are parsed only where an answer needs them; `nsysmap.attribution.attribute` turns the
positions into values, a chunk of operations at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from nsysmap.attribution.labels import (
    ATEN_OP,
    LABELS,
    SEQ,
    autograd_nodes,
    may_name_scope,
    name_labels,
)
from nsysmap.attribution.rules import BUILTIN, WARMUP, NameRules
from nsysmap.intervals.forest import Forest, group_index
from nsysmap.intervals.nesting import nest_repaired

SCOPE_FAMILIES = {"step": "lbl_step", "phase": "lbl_phase", "module": "lbl_module"}
# Warm-up ranges (names the rules mark `warmup`) are looked up as a family of
# their own: an operation inside one is warm-up work whatever its phase.
WINDOW_FAMILIES = ("step", "phase", WARMUP)
# Ranges of autograd's nodes (labels.AUTOGRAD_NODE): backward work, whatever the phase.
AUTOGRAD = "autograd"
# Columns of `locate`: range positions (UInt32, null when none) and `projected`.
# `other`: the innermost of the step, phase and warm-up ranges taken from another thread.
ANCHORS = ("inner", "step", "phase", WARMUP, "module", "aten", "seq_module", "other", AUTOGRAD)


@dataclass(frozen=True)
class Scope:
    """Nested ranges by position, and the labels of names that may give a scope.

    Those names repeat (the same module ranges every step), so their labels
    are kept once per distinct name: `name_at` holds, per range position, the
    index of its name in `table` (null: a name that gives no scope), so that a
    lookup is two gathers.
    """

    ranges: pl.DataFrame
    forest: Forest
    name_at: pl.Series  # per range: index into table (UInt32), null when not scoped
    table: pl.DataFrame  # LABELS per distinct name
    members: dict[str, pl.Series]  # family -> Boolean per range

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
        return cls(ranges, Forest.of(ranges, thread, "range_id"), name_at, table, members)

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


@dataclass(frozen=True)
class Queries:
    """Launched operations sorted by launch time: op row, process, thread code, time."""

    row: pl.Series
    pid: pl.Series
    thread: pl.Series
    t: pl.Series


def queries(ops: pl.DataFrame, thread: pl.Series) -> Queries:
    frame = ops.select("pid", t="launch_start_ns").with_columns(
        thread=thread, row=pl.int_range(pl.len(), dtype=pl.UInt32)
    )
    frame = frame.filter(pl.col("t").is_not_null() & pl.col("thread").is_not_null())
    frame = frame[frame["t"].arg_sort()]
    return Queries(frame["row"], frame["pid"], frame["thread"], frame["t"])


def locate(scope: Scope, q: Queries, n_ops: int) -> pl.DataFrame:
    """ANCHORS and `projected` for each of the `n_ops` operations, in operation order."""
    forest = scope.forest
    inner = forest.innermost(q.thread, q.t)
    found = {f: forest.innermost(q.thread, q.t, scope.members[f]) for f in SCOPE_FAMILIES}
    found[WARMUP] = pl.repeat(None, q.t.len(), dtype=pl.UInt32, eager=True)
    if scope.members[WARMUP].any():
        found[WARMUP] = forest.innermost(q.thread, q.t, scope.members[WARMUP])
    found["inner"] = inner
    found[AUTOGRAD] = pl.repeat(None, q.t.len(), dtype=pl.UInt32, eager=True)
    if scope.members[AUTOGRAD].any():
        found[AUTOGRAD] = forest.innermost(q.thread, q.t, scope.members[AUTOGRAD])
    found["aten"] = forest.climb(inner, q.t, scope.names_match(ATEN_OP))
    projected = pl.repeat(False, q.t.len(), eager=True)
    taken = {}
    for family in WINDOW_FAMILIES:
        found[family], filled = _window(scope, q, found[family], family)
        projected = projected | filled
        taken[family] = pl.select(pl.when(filled).then(found[family])).to_series()
    found["other"] = _innermost_of(taken, scope.ranges["depth"])
    found["seq_module"] = _module_via_seq(scope, q, inner, found["module"])
    where = pl.repeat(None, n_ops, dtype=pl.UInt32, eager=True)
    where = where.scatter(q.row, pl.int_range(q.row.len(), dtype=pl.UInt32, eager=True))
    located = pl.DataFrame({**{a: found[a] for a in ANCHORS}, "projected": projected})
    return located.select(pl.all().gather(where))


def _innermost_of(taken: dict[str, pl.Series], depth: pl.Series) -> pl.Series:
    """Per op, the deepest of the ranges taken from another thread (phase, then
    warm-up, then step on a tie); null when none was.

        main thread      |------------ step ------------------------|
                            |-------- backward pass ---------|
        autograd thread       |- MmBackward0 -|
        launch                        ^ kernel: other = `backward pass`
    """
    families = ("phase", WARMUP, "step")
    frame = pl.DataFrame(
        {**{f: taken[f] for f in families}, **{f"d_{f}": depth.gather(taken[f]) for f in families}}
    )
    deepest = pl.max_horizontal(*(pl.col(f"d_{f}") for f in families))
    pick = pl.coalesce(pl.when(pl.col(f"d_{f}") == deepest).then(pl.col(f)) for f in families)
    return frame.select(pick.cast(pl.UInt32)).to_series()


def _window(
    scope: Scope, q: Queries, anchor: pl.Series, family: str
) -> tuple[pl.Series, pl.Series]:
    """Fill unknown `anchor`s from the family's ranges of the same process, any thread.

    Returns the anchors and which were filled.
    """
    need = anchor.is_null().arg_true()
    member = scope.members[family]
    filled = pl.repeat(False, anchor.len(), eager=True)
    if not need.len() or not member.any():
        return anchor, filled
    family_ranges = scope.ranges.select("pid", "start_ns", "end_ns").with_columns(
        pos=pl.int_range(pl.len(), dtype=pl.Int64)
    )
    nested, _ = nest_repaired(family_ranges.filter(member), by=("pid",), id_col="pos")
    window = Forest.of(nested, nested["pid"], "pos")
    found = window.innermost(q.pid.gather(need), q.t.gather(need))
    at = nested["pos"].gather(found).cast(pl.UInt32)
    hit = at.is_not_null()
    return anchor.scatter(need.filter(hit), at.filter(hit)), filled.scatter(need.filter(hit), True)


def _module_via_seq(scope: Scope, q: Queries, inner: pl.Series, module: pl.Series) -> pl.Series:
    """Module range positions for backward ops (`stashed seq = N`) outside any module range.

    The innermost range carrying a sequence number on the launching thread is
    the op's autograd node; for a backward node with no module range around
    it, the module is the one around the forward op with the same number in
    the same process (the earliest such forward op that has one).
    """
    out = pl.repeat(None, q.t.len(), dtype=pl.UInt32, eager=True)
    need = (module.is_null() & inner.is_not_null()).arg_true()
    if not need.len() or not scope.members["module"].any():
        return out
    node = scope.forest.climb(inner.gather(need), q.t.gather(need), scope.names_match(SEQ))
    nodes = name_labels(scope.ranges["name"].gather(node), ["lbl_seq", "lbl_stashed"])
    nodes = nodes.with_columns(i=need, pid=q.pid.gather(need)).filter(pl.col("lbl_stashed"))
    if nodes.is_empty():
        return out
    names = scope.ranges["name"]
    wanted = nodes["lbl_seq"].unique()
    pos = _maybe_forward_seq(names, wanted)
    forward = name_labels(names.gather(pos), ["lbl_seq", "lbl_stashed"]).with_columns(
        pos=pos, pid=scope.ranges["pid"].gather(pos), start=scope.ranges["start_ns"].gather(pos)
    )
    forward = forward.filter(pl.col("lbl_stashed").not_()).join(
        nodes.select("pid", "lbl_seq").unique(), on=["pid", "lbl_seq"], how="semi"
    )
    forward = forward.sort("start", "pos")
    thread = scope.forest.thread.gather(forward["pos"])
    around = scope.forest.innermost(thread, forward["start"], scope.members["module"])
    seq_map = (
        forward.with_columns(module=around)
        .filter(pl.col("module").is_not_null())
        .unique(subset=["pid", "lbl_seq"], keep="first", maintain_order=True)
    )
    linked = nodes.join(seq_map.select("pid", "lbl_seq", "module"), on=["pid", "lbl_seq"])
    return out.scatter(linked["i"], linked["module"])


def _maybe_forward_seq(names: pl.Series, seqs: pl.Series) -> pl.Series:
    """Positions of every name with a forward `seq = N`, N in `seqs` (and of a few others).

    Such a name contains "seq = N" as text (or "seq = 0..." with leading
    zeros), which one multi-pattern scan of all names finds; the forward
    `seq` field is checked on those alone, and lbl_seq is parsed there.
    """
    texts = pl.select(pl.format("seq = {}", seqs)).to_series().to_list()
    pos = names.str.contains_any([*texts, "seq = 0"]).fill_null(False).arg_true()
    found = names.gather(pos)
    seq = found.str.contains(", seq = ", literal=True) | found.str.starts_with("seq = ")
    return pos.filter(seq & ~found.str.contains("stashed seq = ", literal=True))
