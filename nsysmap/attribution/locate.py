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

from dataclasses import dataclass

import polars as pl

from nsysmap.attribution.labels import ATEN_OP, SEQ, name_labels
from nsysmap.attribution.rules import WARMUP
from nsysmap.attribution.scope import ANCHORS, FAMILIES, SCOPE_FAMILIES, WINDOW_FAMILIES, Scope
from nsysmap.intervals.forest import Forest
from nsysmap.intervals.nesting import nest_repaired


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
    found = _anchors(scope, q)
    projected = pl.repeat(False, q.t.len(), eager=True)
    taken = {}
    for family in WINDOW_FAMILIES:
        found[family], filled = _window(scope, q, found[family], family)
        projected = projected | filled
        taken[family] = pl.select(pl.when(filled).then(found[family])).to_series()
    found["other"] = _innermost_of(taken, scope.ranges["depth"])
    found["seq_module"] = _module_via_seq(scope, q, found["inner"], found["module"])
    where = pl.repeat(None, n_ops, dtype=pl.UInt32, eager=True)
    where = where.scatter(q.row, pl.int_range(q.row.len(), dtype=pl.UInt32, eager=True))
    located = pl.DataFrame({**{a: found[a] for a in ANCHORS}, "projected": projected})
    return located.select(pl.all().gather(where))


def _anchors(scope: Scope, q: Queries) -> dict[str, pl.Series]:
    """Per query: the innermost range on its thread, the innermost of each family
    there, and the operator range (`aten`, the innermost named like one)."""
    pre = scope.preorder
    if pre is None:
        return _anchors_by_forest(scope, q)
    rows = pre.innermost(q.thread.cast(pl.Int64).to_numpy(), q.t.to_numpy())
    found = {"inner": pre.rows(rows), **scope.around(rows)}
    found["aten"] = pre.rows(pre.climb(rows, scope.rows_match(ATEN_OP)))
    return found


def _anchors_by_forest(scope: Scope, q: Queries) -> dict[str, pl.Series]:
    """`_anchors` by as-of joins and climbs (ranges that do not form a proper forest)."""
    forest = scope.forest
    inner = forest.innermost(q.thread, q.t)
    found = {"inner": inner}
    for family in FAMILIES:
        found[family] = _none(q.t.len())
        if family in SCOPE_FAMILIES or scope.members[family].any():
            found[family] = forest.innermost(q.thread, q.t, scope.members[family])
    found["aten"] = forest.climb(inner, q.t, scope.names_match(ATEN_OP))
    return found


def _none(n: int) -> pl.Series:
    return pl.repeat(None, n, dtype=pl.UInt32, eager=True)


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
    at = latest_open(scope, member, q.pid.gather(need), q.t.gather(need))
    hit = at.is_not_null()
    return anchor.scatter(need.filter(hit), at.filter(hit)), filled.scatter(need.filter(hit), True)


def latest_open(scope: Scope, member: pl.Series, pid: pl.Series, t: pl.Series) -> pl.Series:
    """Per query (`pid`, `t` sorted), the member range of that process, on any thread,
    open at `t` that started last (UInt32 position, null when none is open).

    Each thread's member ranges nest; ranges of different threads may cross,
    and are not clipped against each other, so the answer at `t` depends on
    the ranges open at `t` alone, not on what a read saw before (a read in
    time windows answers as a whole read does). Of ranges that started
    together, the one that ends first, then the first by name and thread:

        thread 1   |------ A ------|
        thread 2           |------ B ------|
        t             ^ A       ^ B      ^ B
    """
    pos = member.arg_true()
    ranges = scope.ranges
    own = pl.DataFrame(
        {
            "pos": pos.cast(pl.Int64),
            "pid": ranges["pid"].gather(pos),
            "thread": scope.thread.gather(pos),
            "start_ns": ranges["start_ns"].gather(pos),
            "end_ns": ranges["end_ns"].gather(pos),
        }
    )
    nested, _ = nest_repaired(own, by=("pid", "thread"), id_col="pos")
    forest = Forest.of(nested, nested["thread"], "pos")
    at = pl.repeat(None, t.len(), dtype=pl.UInt32, eager=True)
    threads = nested.select("pid", "thread", tid=ranges["tid"].gather(nested["pos"])).unique()
    for pid_of, thread, _tid in threads.sort("tid", "thread").rows():
        mine = (pid == pid_of).fill_null(False).arg_true()
        if not mine.len():
            continue
        query = pl.repeat(thread, mine.len(), dtype=nested["thread"].dtype, eager=True)
        found = nested["pos"].gather(forest.innermost(query, t.gather(mine))).cast(pl.UInt32)
        better = _comes_first(ranges, found, at.gather(mine))
        at = at.scatter(mine.filter(better), found.filter(better))
    return at


def _comes_first(ranges: pl.DataFrame, found: pl.Series, held: pl.Series) -> pl.Series:
    """Per pair of range positions, whether `found` (null: none) comes before `held`
    (null: none yet): a later start, then an earlier end, then the first name."""
    f_start, f_end, f_name = (ranges[c].gather(found) for c in ("start_ns", "end_ns", "name"))
    h_start, h_end, h_name = (ranges[c].gather(held) for c in ("start_ns", "end_ns", "name"))
    tie = f_start == h_start
    later = (f_start > h_start) | tie & ((f_end < h_end) | (f_end == h_end) & (f_name < h_name))
    return found.is_not_null() & (held.is_null() | later.fill_null(False))


def _module_via_seq(scope: Scope, q: Queries, inner: pl.Series, module: pl.Series) -> pl.Series:
    """Module range positions for backward ops (`stashed seq = N`) outside any module range.

    The innermost range carrying a sequence number on the launching thread is
    the op's autograd node; for a backward node with no module range around
    it, the module is the one around the forward op with the same number in
    the same process that made the node: the latest such op that started
    before the node (none where that op is outside every module). Several
    forward ops carry one number: each records the number the next autograd
    node will take, so ops that make no node (a dropout that does nothing, a
    view) and a composite op around the one that makes it carry it too; the
    op that makes the node starts last::

        Dropout_0      aten::dropout, seq = 125            (no node: p = 0)
        LayerNorm_0    aten::native_layer_norm, seq = 125  (makes node 125)
        backward       NativeLayerNormBackward0, stashed seq = 125  -> LayerNorm_0
    """
    out = pl.repeat(None, q.t.len(), dtype=pl.UInt32, eager=True)
    need = (module.is_null() & inner.is_not_null()).arg_true()
    if not need.len() or not scope.members["module"].any():
        return out
    node = _climb(scope, inner.gather(need), q.t.gather(need), SEQ)
    nodes = name_labels(scope.ranges["name"].gather(node), ["lbl_seq", "lbl_stashed"])
    nodes = nodes.with_columns(
        i=need, pid=q.pid.gather(need), start=scope.ranges["start_ns"].gather(node)
    ).filter(pl.col("lbl_stashed"))
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
    around = _module_at(scope, scope.thread.gather(forward["pos"]), forward["start"])
    made = forward.select("pid", "lbl_seq", "start", module=around)
    linked = nodes.sort("start").join_asof(  # the latest forward op at or before the node
        made, on="start", by=["pid", "lbl_seq"], strategy="backward", check_sortedness=False
    )
    linked = linked.filter(pl.col("module").is_not_null())
    return out.scatter(linked["i"], linked["module"])


def _climb(scope: Scope, cand: pl.Series, t: pl.Series, pattern: str) -> pl.Series:
    """From each of `cand` (open at `t`), the first of it and the ranges around it
    whose name matches `pattern`."""
    pre = scope.preorder
    if pre is None:
        return scope.forest.climb(cand, t, scope.names_match(pattern))
    rows = cand.cast(pl.Int64).fill_null(pre.n).to_numpy()
    return pre.rows(pre.climb(rows, scope.rows_match(pattern)))


def _module_at(scope: Scope, thread: pl.Series, t: pl.Series) -> pl.Series:
    """The innermost module range open at each `t` (sorted) on each `thread`."""
    pre = scope.preorder
    if pre is None:
        return scope.forest.innermost(thread, t, scope.members["module"])
    rows = pre.innermost(thread.cast(pl.Int64).to_numpy(), t.to_numpy())
    return scope.around(rows, 1)["module"]


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
