"""Range names, each distinct one once: tests on names run once per name, not per range.

The same names come back every step (module and phase ranges) and in every
process of a multi-process export (operator ranges, `aten::addmm, seq = 248,
op_id = 354, ...`): the 2.9 million ranges of the 10^6-kernel benchmark hold
0.8 million distinct names. A test of the names (a regular expression, a
literal search) runs over `DistinctNames.names` and reaches every range
through `at`, one gather.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from nsysmap.scalars import to_int

# Names are coded only when at most this share of them is distinct: coding costs about
# as much as two tests of every name (0.6 CPU s for 1.6 million names, 0.97 million
# distinct, where the tests saved 0.1 s).
CODED_SHARE = 0.5


@dataclass(frozen=True)
class DistinctNames:
    """Each distinct non-null name once (`names`), and per range its index into them
    (`at`; None: names not coded, each range its own entry)."""

    names: pl.Series  # String, in no particular order
    at: pl.Series | None  # UInt32 per range: index into `names`; null for a null name

    @classmethod
    def of(cls, names: pl.Series) -> DistinctNames:
        """The distinct names, when few enough repeat to pay for coding (CODED_SHARE);
        else the names as they are. Either gives the same answers."""
        if names.hash().n_unique() > CODED_SHARE * names.len():  # collisions only lower it
            return cls(names, None)
        code = names.cast(pl.Categorical).to_physical()  # equal names, equal codes
        first = pl.DataFrame({"code": code}).with_row_index("row").drop_nulls("code")
        first = first.unique("code", keep="first", maintain_order=True)
        size = to_int(first["code"].max() or 0) + 1
        entry = pl.int_range(first.height, dtype=pl.UInt32, eager=True)
        index = pl.repeat(None, size, dtype=pl.UInt32, eager=True).scatter(first["code"], entry)
        return cls(names.gather(first["row"]), index.gather(code))

    def index(self, positions: pl.Series) -> pl.Series:
        """The index into `names` of the ranges at `positions` (null stays null)."""
        return positions.cast(pl.UInt32) if self.at is None else self.at.gather(positions)

    def per_range(self, values: pl.Series) -> pl.Series:
        """`values` (one per entry of `names`) for every range (null for a null name)."""
        return values if self.at is None else values.gather(self.at)

    def ranges_named(self, hits: pl.Series) -> pl.Series:
        """Positions (ascending) of the ranges whose name is one of `hits` (ascending
        indices into `names`)."""
        if self.at is None:
            return hits
        return self.at.is_in(hits.implode()).fill_null(False).arg_true()
