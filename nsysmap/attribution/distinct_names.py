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


@dataclass(frozen=True)
class DistinctNames:
    """Each distinct non-null name once (`names`), and per range its index into them."""

    names: pl.Series  # String, each once, in no particular order
    at: pl.Series  # UInt32 per range: index into `names`; null for a null name

    @classmethod
    def of(cls, names: pl.Series) -> DistinctNames:
        code = names.cast(pl.Categorical).to_physical()  # equal names, equal codes
        first = pl.DataFrame({"code": code}).with_row_index("row").drop_nulls("code")
        first = first.unique("code", keep="first", maintain_order=True)
        index = pl.repeat(None, to_int(first["code"].max() or 0) + 1, dtype=pl.UInt32, eager=True)
        index = index.scatter(first["code"], pl.int_range(first.height, dtype=pl.UInt32, eager=True))
        return cls(names.gather(first["row"]), index.gather(code))

    def per_range(self, values: pl.Series) -> pl.Series:
        """`values` (one per distinct name) for every range (null for a null name)."""
        return values.gather(self.at)

    def ranges_named(self, hits: pl.Series) -> pl.Series:
        """Positions (ascending) of the ranges whose name is one of `hits` (indices into
        `names`)."""
        return self.at.is_in(hits.implode()).fill_null(False).arg_true()
