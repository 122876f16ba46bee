"""How findings write their numbers and names in sentences (pure)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from nsysmap.attribution.paths import PATH_SEPARATOR
from nsysmap.core.inert import markdown_code
from nsysmap.summaries.range_paths import path_keys

NO_MODULE = "(no module)"


def ms(ns: float | None) -> str:
    """Nanoseconds as milliseconds: "1.234 ms"."""
    return "–" if ns is None else f"{ns / 1e6:,.3f} ms"


def pct(share: float | None) -> str:
    """A share as a percentage: "12.3 %"."""
    return "–" if share is None else f"{100 * share:.1f} %"


def count(n: float) -> str:
    """A count per step: whole counts without decimals, others with one."""
    return f"{n:,.0f}" if float(n).is_integer() else f"{n:,.1f}"


def plural(n: float, noun: str, nouns: str | None = None) -> str:
    """ "1 gap", "2.5 gaps": a count per step and its noun (`nouns`: its plural, when
    not `noun` + "s")."""
    return f"{count(n)} {noun if n == 1 else nouns or noun + 's'}"


def cut(text: str, width: int) -> str:
    """`text`, cut in the middle to `width` characters when longer."""
    if len(text) <= width:
        return text
    half = (width - 1) // 2
    return f"{text[:half]}…{text[len(text) - (width - 1 - half) :]}"


def share(part: float, whole: float) -> float | None:
    """part / whole; None when whole is 0."""
    return part / whole if whole else None


def listed(names: Sequence[str], limit: int = 3) -> str:
    """`a`, `b`, `c` and N more."""
    shown = ", ".join(markdown_code(n) for n in names[:limit])
    more = len(names) - limit
    return shown + (f" and {more} more" if more > 0 else "")


def top_names(frame: pl.DataFrame, name: str, by: str, limit: int = 3) -> str:
    """The `limit` names of `frame` with most `by`, listed ("" when none is named); nulls
    named NO_MODULE."""
    if frame[name].is_null().all():
        return ""
    rows = frame.group_by(name).agg(pl.col(by).sum()).sort([by, name], descending=[True, False])
    names = [NO_MODULE if v is None else str(v) for v in rows[name].to_list()]
    return listed(names, limit)


def phase_text(phase: str | None, per_step: bool = True) -> str:
    """ "phase optimizer", or for no phase "the whole step" (`per_step`: steps are
    measured) or "all the measured work" (none is: the measured work counts as one)."""
    if phase is not None:
        return f"phase {phase}"
    return "the whole step" if per_step else "all the measured work"


def path_text(path: str | None, last: int | None = None) -> str | None:
    """A range path as by_range.parquet writes it (PyTorch's per-call fields removed, step
    numbers as `*`), its `last` names only when given."""
    if path is None:
        return None
    names = path.split(PATH_SEPARATOR)
    names = names[-last:] if last else names
    return PATH_SEPARATOR.join(path_keys(pl.Series(names, dtype=pl.String)).to_list())
