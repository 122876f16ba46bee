"""Python scalars out of Polars aggregates, with the type the caller relies on.

`Series.max()`, `Series.sum()` and `DataFrame.item()` are typed as any Python
literal (a number, a date, a string, None...). The aggregates nsysmap takes are
over numeric columns; these helpers say so once, and fail loudly otherwise.
"""

from __future__ import annotations

from typing import SupportsFloat, SupportsInt


def to_int(value: object) -> int:
    """`int(value)` for a numeric scalar; TypeError for anything else (None included)."""
    if isinstance(value, SupportsInt):
        return int(value)
    raise TypeError(f"expected a numeric scalar, got {value!r}")


def to_float(value: object) -> float:
    """`float(value)` for a numeric scalar; TypeError for anything else (None included)."""
    if isinstance(value, SupportsFloat):
        return float(value)
    raise TypeError(f"expected a numeric scalar, got {value!r}")


def opt_int(value: object) -> int | None:
    """`to_int`, with None (an empty or all-null aggregate) kept as None."""
    return None if value is None else to_int(value)
