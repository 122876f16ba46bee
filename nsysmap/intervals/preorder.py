"""Nested intervals in pre-order: one sort per profile that every lookup shares (pure).

The intervals of a thread sorted by (start, -end, id), one thread after the
other, are in nesting pre-order: each comes before everything inside it, and
what is inside the one at `pos` runs up to its `stop`::

    thread 1   |------------- A (pos 0) --------------|      A: stop 4
                 |- B (1) -|  |---- C (2) ----|              B: stop 2
                                 |- D (3) -|                 C, D: stop 4
    thread 2   |-- E (4) --|                                 E: stop 5

With (thread, start) packed into one Int64 per interval, the innermost
interval open at t on a thread is one binary search (the last to start at
or before t) and a climb of parent links to the first still open
(`innermost`). The innermost interval of a family (steps, phases, modules)
open at t is then the family's nearest of that one and its ancestors, which
one climb finds for every family at once (`around`): no lookup per family.

Both need a proper forest, one where no interval ends after its parent
(nsysmap.intervals.nesting repairs crossings): then every interval open at t
is an ancestor of the innermost one, and ends never decrease up a chain.
`Preorder.of` is None otherwise (or when times are missing or too wide to
pack); callers then take `nsysmap.intervals.forest.Forest`'s lookups, which
need no such promise and give the same answers where both apply.

Rows are addressed by position in the input (`row`); `n` (the number of
rows) stands for "none" in every array here, which holds one entry more for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from nsysmap.core.scalars import to_int
from nsysmap.intervals.forest import CLIMB_ROUNDS, group_order, sorted_order

_KEY_BITS = 62
_NEVER = np.iinfo(np.int64).max  # the end of "none": open at every time


@dataclass(frozen=True)
class Preorder:
    """Intervals in nesting pre-order, and by row: thread, end, parent, depth."""

    order: np.ndarray  # pos -> row
    keys: np.ndarray  # pos -> packed (thread, start), ascending
    thread: np.ndarray  # row -> thread code
    end: np.ndarray  # row -> end (none: _NEVER)
    parent: np.ndarray  # row -> parent row (none: n)
    depth: np.ndarray  # row -> depth, 1 outermost (none: 0)
    t0: int  # the earliest start: time 0 of the packed keys
    t_bits: int  # bits of the packed keys below the thread

    @property
    def n(self) -> int:
        return int(self.order.size)

    @classmethod
    def of(
        cls,
        thread: pl.Series,
        n_threads: int,
        start: pl.Series,
        end: pl.Series,
        ids: pl.Series,
        parent: pl.Series,
        depth: pl.Series,
    ) -> Preorder | None:
        """From each interval's thread code (0 .. n_threads - 1), times, id, parent
        row (null at the top) and depth; None where the forest is not proper, or
        a value is missing, or the keys do not pack."""
        n = start.len()
        if not n or thread.null_count() or start.null_count() or end.null_count():
            return None
        if depth.null_count() or ids.null_count():
            return None
        index = np.int32 if n < (1 << 31) - 1 else np.int64  # rows: half the bytes
        ends = np.append(end.cast(pl.Int64).to_numpy(), _NEVER)
        up = parent.cast(pl.Int64).fill_null(n).to_numpy().astype(index)
        if (ends[:-1] > ends[up]).any():
            return None  # a crossing: no promise that open intervals are ancestors
        t0 = to_int(start.min())
        t_bits = (max(to_int(end.max()), to_int(start.max())) - t0).bit_length()
        if max(1, (n_threads - 1).bit_length()) + t_bits > _KEY_BITS:
            return None
        code = thread.cast(pl.Int64)
        packed = code * (1 << t_bits) + (start.cast(pl.Int64) - t0)
        order = sorted_order(
            packed,
            lambda at: pl.DataFrame({"k1": -end.gather(at), "k2": ids.gather(at)}),
            group_order(thread, n_threads, start),  # starts in time order: no sort
        ).to_numpy()
        return cls(
            order=order.astype(index),
            keys=packed.to_numpy()[order],
            thread=thread.cast(pl.Int64).to_numpy().astype(index),
            end=ends,
            parent=np.append(up, n).astype(index),
            depth=np.append(depth.cast(pl.Int32).to_numpy(), 0),
            t0=t0,
            t_bits=t_bits,
        )

    def innermost(self, thread: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Per query, the row of the innermost interval open at `t` on `thread` (n:
        none). A thread below 0 has no interval."""
        top = (1 << self.t_bits) - 1
        valid = (thread >= 0) & (t >= self.t0)
        query = thread * (1 << self.t_bits) + np.minimum(np.maximum(t - self.t0, 0), top)
        at = np.searchsorted(self.keys, query, side="right") - 1
        found = self.keys[np.maximum(at, 0)] >> self.t_bits == thread
        rows = np.where(valid & (at >= 0) & found, self.order[np.maximum(at, 0)], self.n)
        return self.open_at(rows, t)

    def open_at(self, rows: np.ndarray, t: np.ndarray) -> np.ndarray:
        """From each of `rows`, the first of it and its ancestors still open at `t`."""
        cur = rows.copy()
        todo = np.flatnonzero(self.end[cur] <= t)
        for _ in range(CLIMB_ROUNDS):
            if not todo.size:
                return cur
            cur[todo] = self.parent[cur[todo]]
            todo = todo[self.end[cur[todo]] <= t[todo]]
        if todo.size:
            cur[todo] = self._lift(cur[todo], t[todo])
        return cur

    def _lift(self, cur: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The first ancestor open at `t` of each of `cur` (closed at `t`): ends never
        decrease up a chain, so jump by 2^k while the interval reached is closed."""
        tables = [self.parent]
        while (tables[-1][:-1] < self.n).any():
            tables.append(tables[-1][tables[-1]])
        for jump in reversed(tables):
            ahead = jump[cur]
            cur = np.where(self.end[ahead] <= t, ahead, cur)
        return self.parent[cur]

    def around(self, rows: np.ndarray, families: np.ndarray, count: int) -> list[np.ndarray]:
        """Per family f < `count` (bit f of `families`, a bit mask per row; Uint8), per
        one of `rows`: the nearest of it and its ancestors in the family (n: none).

        One climb from every row at once, each family's answer taken where the
        climb first meets it, until every family is met or the top is reached:
        a gather of the masks and one of the parents per level, whatever the
        number of families.
        """
        found = np.full((count, rows.size), self.n, dtype=np.int64)
        bits = np.append(families & ((1 << count) - 1), 0).astype(np.uint8)
        index = np.flatnonzero(rows < self.n)
        cur = rows[index]
        pending = np.full(index.size, (1 << count) - 1, dtype=np.uint8)
        while index.size:
            new = bits[cur] & pending
            hit = np.flatnonzero(new)
            if hit.size:
                met = (new[hit, None] >> np.arange(count, dtype=np.uint8)) & 1
                which, family = np.nonzero(met)
                found[family, index[hit[which]]] = cur[hit[which]]
                pending[hit] &= ~new[hit]
            cur = self.parent[cur]
            keep = (cur < self.n) & (pending != 0)
            index, cur, pending = index[keep], cur[keep], pending[keep]
        return list(found)

    def stops(self) -> np.ndarray:
        """Per pos, the pos after the last interval inside it (the ones inside are
        pos + 1 .. stop - 1; stop is pos for a zero-length interval)."""
        thread = self.thread[self.order].astype(np.int64)
        ends = thread * (1 << self.t_bits) + (self.end[self.order] - self.t0)
        pos = np.arange(self.n)
        # Most intervals hold none: the next one starts at or after their end (or on
        # another thread), and stop is pos + 1. Only the others are searched for.
        stop = pos + 1
        holding = np.flatnonzero(self.keys[1:] < ends[:-1])
        stop[holding] = np.searchsorted(self.keys, ends[holding], side="left")
        empty = ends <= self.keys  # zero-length (or ending before it starts): holds none
        stop[empty] = pos[empty]
        return stop

    def climb(self, rows: np.ndarray, accept: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """From each of `rows`, the first of it and its ancestors that `accept` (a test
        on rows) passes; n: none. In a proper forest every ancestor of the innermost
        interval open at t is open at t too, so no time is checked."""
        cur = rows.copy()
        todo = np.flatnonzero(cur < self.n)
        for _ in range(CLIMB_ROUNDS):
            if not todo.size:
                return cur
            todo = todo[~accept(cur[todo])]
            cur[todo] = self.parent[cur[todo]]
            todo = todo[cur[todo] < self.n]
        if todo.size:  # deep: every row tested once, then one climb
            member = accept(np.arange(self.n)).astype(np.uint8)
            cur[todo] = self.around(cur[todo], member, 1)[0]
        return cur

    def rows(self, found: np.ndarray) -> pl.Series:
        """Rows found by a lookup here as UInt32 positions (null: none)."""
        series = pl.Series(found, dtype=pl.Int64)
        return pl.select(pl.when(series < self.n).then(series)).to_series().cast(pl.UInt32)
