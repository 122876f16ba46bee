"""The terminal text of `nsysmap diff`: a summary line, then the biggest changes per level."""

from __future__ import annotations

import polars as pl

from nsysmap.core.inert import terminal_text
from nsysmap.diff.compare import OUTSIDE, Diff, Side, biggest
from nsysmap.report.html.names import distinct_labels

ROWS = 10  # rows shown per level
LISTED = 8  # unmatched names listed per level
TITLES = {"phase": "phase", "module": "module", "category": "category", "kernel": "kernel"}


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f}"


def _signed(ns: float) -> str:
    return f"{'+' if ns >= 0 else '-'}{abs(ns) / 1e6:,.3f} ms"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:+.1f} %"


def name(row: dict, level: str) -> str:
    """How a row is named: module path (class), phase, category; kernels by `kernel_labels`."""
    if row["key"] is None:
        return OUTSIDE[level]
    if level == "module":
        path = row["key"] or "(root)"
        return f"{path} ({row['label']})" if row["label"] else path
    return row["key"]


def kernel_labels(rows: pl.DataFrame) -> dict[str | None, str]:
    """Full kernel name -> its label: the short name unless kernels share it, cut in the middle
    so that no two kernels look alike."""
    short = pl.coalesce("label", "key", pl.lit(OUTSIDE["kernel"]))
    shared = pl.col("key").n_unique().over(short) > 1
    texts = rows.select(pl.when(shared).then(pl.col("key")).otherwise(short)).to_series()
    return dict(zip(rows["key"], distinct_labels(texts.to_list(), 60), strict=True))


def names(diff: Diff, level: str, rows: pl.DataFrame) -> list[str]:
    """The names of `rows` (rows of `diff`'s level)."""
    if level != "kernel":
        return [name(r, level) for r in rows.iter_rows(named=True)]
    labels = kernel_labels(diff.levels["kernel"])
    return [labels[k] for k in rows["key"]]


def unmatched(diff: Diff, level: str) -> tuple[list[str], list[str]]:
    """Names of the rows found only in run A, and only in run B."""
    rows = diff.levels[level]
    only_a, only_b = (rows.filter(pl.col("match") == m) for m in ("only_a", "only_b"))
    return names(diff, level, only_a), names(diff, level, only_b)


def summary(diff: Diff) -> str:
    """One line: how much per step changed, and where most of it went."""
    change = diff.change_ns
    ratio = change / diff.a.per_step_ns if diff.a.per_step_ns else None
    if change == 0:
        head = "B takes the same time per step as A"
    else:
        how = "slower" if change > 0 else "faster"
        head = f"B is {_ms(abs(change))} ms per step {how} than A ({_pct(ratio)})"
    parts = []
    for level in ("module", "phase", "category", "kernel"):
        row = biggest(diff, level)
        if row is not None:
            label = names(diff, level, pl.DataFrame([row], schema=diff.levels[level].schema))[0]
            share = (
                "" if row["change_share"] is None else f", {100 * row['change_share']:.0f} % of it"
            )
            parts.append(
                f"{level} {terminal_text(label)} {_signed(row['change_ns_per_step'])}{share}"
            )
    return head + ("; most changed: " + "; ".join(parts) if parts else "") + "."


def render(diff: Diff) -> str:
    """The whole text."""
    lines = [_side("A", diff.a), _side("B", diff.b)]
    lines += diff.notes
    lines += ["", summary(diff)]
    for level, rows in diff.levels.items():
        shown = rows.head(ROWS)
        named = [terminal_text(n) for n in names(diff, level, shown)]
        lines += ["", *_level(level, shown, named, rows.height)]
        lines += _unmatched(diff, level)
    return "\n".join(lines) + "\n"


def _side(which: str, s: Side) -> str:
    scope = terminal_text(s.scope)
    return f"{which}: {terminal_text(s.label)} ({scope}): {_ms(s.per_step_ns)} ms per step"


def _level(level: str, rows: pl.DataFrame, named: list[str], total: int) -> list[str]:
    title = f"{TITLES[level]} (top {len(named)} of {total} by change)"
    width = max([len(title), *map(len, named)])
    head = f"{title:<{width}}"
    lines = [f"{head}  {'A ms':>10} {'B ms':>10} {'change ms':>10} {'change':>8} {'of total':>8}"]
    for label, r in zip(named, rows.iter_rows(named=True), strict=True):
        share = "–" if r["change_share"] is None else f"{100 * r['change_share']:.1f} %"
        lines.append(
            f"{label:<{width}}  {_ms(r['a_ns_per_step']):>10} {_ms(r['b_ns_per_step']):>10} "
            f"{_ms(r['change_ns_per_step']):>10} {_pct(r['change_ratio']):>8} {share:>8}"
        )
    return lines


def _unmatched(diff: Diff, level: str) -> list[str]:
    lines = []
    for side, found in zip(("A", "B"), unmatched(diff, level), strict=True):
        if found:
            shown = ", ".join(terminal_text(n) for n in found[:LISTED])
            more = f" and {len(found) - LISTED} more" if len(found) > LISTED else ""
            lines.append(f"  only in {side} ({len(found)}): {shown}{more}")
    return lines
