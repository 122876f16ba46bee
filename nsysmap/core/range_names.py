"""Parsing range names that instrument/ emits: the other half of the naming contract.

See instrument/ranges/naming.py for the grammar; tests/test_naming_roundtrip.py binds
the two. `parse_range_name` reads one name (for tests and tools);
`naming_columns` is the vectorised form used on whole range tables. Names are
only ever matched with regular expressions, never evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

PREFIX = "nsysmap:"
_STEP = r"^nsysmap:step:(\d+)$"
_PHASE = r"^nsysmap:phase:([a-z_]+)$"
_MODULE = r"(?s)^nsysmap:(fwd|bwd):([^:]+):(.*)$"
_DIRECTION = {"fwd": "forward", "bwd": "backward"}


@dataclass(frozen=True)
class RangeName:
    """What one nsysmap range name says; fields that do not apply are None."""

    kind: str  # "step", "phase" or "module"
    step: int | None = None
    phase: str | None = None
    direction: str | None = None  # "forward" or "backward"
    module_class: str | None = None
    module_path: str | None = None


def parse_range_name(name: str) -> RangeName | None:
    """Parse one range name; None when it is not an nsysmap range."""
    row = pl.DataFrame({"name": [name]}).select(naming_columns(pl.col("name"))).row(0, named=True)
    if row["nsm_kind"] is None:
        return None
    return RangeName(
        kind=row["nsm_kind"],
        step=row["nsm_step"],
        phase=row["nsm_phase"],
        direction=row["nsm_direction"],
        module_class=row["nsm_module_class"],
        module_path=row["nsm_module_path"],
    )


def naming_columns(name: pl.Expr) -> list[pl.Expr]:
    """Expressions that parse a column of range names.

    Produces `nsm_kind`, `nsm_step`, `nsm_phase`, `nsm_direction`,
    `nsm_module_class`, `nsm_module_path`; all null for foreign names.
    """
    step = name.str.extract(_STEP, 1).cast(pl.Int64, strict=False)
    phase = name.str.extract(_PHASE, 1)
    tag = name.str.extract(_MODULE, 1)
    kind = (
        pl.when(step.is_not_null())
        .then(pl.lit("step"))
        .when(phase.is_not_null())
        .then(pl.lit("phase"))
        .when(tag.is_not_null())
        .then(pl.lit("module"))
        .otherwise(pl.lit(None, dtype=pl.String))
    )
    return [
        kind.alias("nsm_kind"),
        step.alias("nsm_step"),
        phase.alias("nsm_phase"),
        tag.replace_strict(_DIRECTION, default=None, return_dtype=pl.String).alias("nsm_direction"),
        name.str.extract(_MODULE, 2).alias("nsm_module_class"),
        name.str.extract(_MODULE, 3).alias("nsm_module_path"),
    ]
