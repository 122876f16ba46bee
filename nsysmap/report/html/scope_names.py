"""A scope as the report names it, for the captions of the HTML report's charts (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nsysmap.report import scope_tables as rt
from nsysmap.report.scopes import describe

if TYPE_CHECKING:
    from nsysmap.report.answers import Findings


def scope_name(x: Findings, scope: str) -> str:
    """A scope as the report names it: its instances in the run's structure."""
    if x.run.structure is None or "s_region" not in x.run.ops.columns:
        return rt.scope_label(x.run.ops, scope)
    return str(describe(x.run.ops, x.run.structure, scope)["label"])
