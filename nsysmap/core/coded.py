"""Texts as codes: what groups, sorts and joins by a text column uses, so that a
text costs memory once, not once per row.

A Polars String column made by gathering (a reader's names, looked up from a
table of distinct strings) shares each distinct text among its rows. Grouping
by several such columns, sorting by one or writing it copies the text into
every row (one 50 MB kernel name in every row of 146 took 9 GB); cast to
Categorical, each distinct text is held once and the rows hold codes.
`lexical_rank` gives the codes a sort key in text order, and `decoded` turns
codes back into texts by gathering from the distinct ones (a plain cast would
copy each row's).
"""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl


def texts(frame: pl.DataFrame | pl.LazyFrame, columns: Iterable[str]) -> list[str]:
    """Those of `columns` that are String columns of `frame`."""
    schema = frame.collect_schema()
    return [c for c in dict.fromkeys(columns) if schema.get(c) == pl.String]


def coded(columns: Iterable[str]) -> list[pl.Expr]:
    """`columns` (String) cast to Categorical: each distinct text held once."""
    return [pl.col(c).cast(pl.Categorical) for c in columns]


def decoded(frame: pl.DataFrame, columns: Iterable[str] | None = None) -> pl.DataFrame:
    """`frame` with its Categorical columns (of `columns`, default all) as String,
    each distinct text copied once and gathered into the rows."""
    names = frame.columns if columns is None else [c for c in columns if c in frame.columns]
    for name in names:
        codes = frame[name]
        if codes.dtype != pl.Categorical:
            continue
        distinct = codes.unique().drop_nulls()
        text = codes.to_physical().replace_strict(
            distinct.to_physical(), distinct.cast(pl.String), default=None, return_dtype=pl.String
        )
        frame = frame.with_columns(text.alias(name))
    return frame


def lexical_rank(names: pl.Series) -> pl.Series:
    """Per row of a Categorical Series, its name's dense rank in the names' sorted order
    (null: null), sorting only the distinct names: a sort key that never copies a text
    into every row (sorting by several columns, one a text, would)."""
    distinct = names.unique().drop_nulls()
    ranks = pl.DataFrame(
        {"_code": distinct.to_physical(), "_rank": distinct.cast(pl.String).rank("dense")}
    )
    codes = pl.DataFrame({"_code": names.to_physical()})
    return codes.join(ranks, on="_code", how="left", maintain_order="left")["_rank"]
