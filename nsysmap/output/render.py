"""The terminal summary: plain text from the summary tables (pure, no printing)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from nsysmap.output.summarize import Summaries

TOP = 10
MAX_LABEL = 72
_NONE = "(none)"
_REASONS = {
    "window": "given step/phase from a range on another thread of the process",
    "no_range": "launched outside any range",
    "no_launch": "no launch record in the capture",
}


def render_summary(summaries: Summaries, meta: dict[str, str], *, top: int = TOP) -> str:
    """A readable breakdown: coverage, phases, modules, kernels, categories."""
    cpu = meta.get("unit_of_work") == "cpu_op"
    unit = "CPU operator self time" if cpu else "GPU time"
    op_word = "operators" if cpu else "kernels"
    parts = [
        _header(summaries, meta, unit),
        _coverage(summaries.coverage, unit) + "\n" + _known_shares(summaries),
        _section(f"{unit} by phase", summaries.by_phase, ["phase"], top),
        _section("Top modules", summaries.by_module, ["module", "module_class"], top),
        _section(f"Top {op_word}", summaries.by_kernel, ["short_name", "category"], top),
        _section("Categories", summaries.by_category, ["category"], top),
    ]
    return "\n\n".join(p for p in parts if p) + "\n"


def _header(summaries: Summaries, meta: dict[str, str], unit: str) -> str:
    cov = summaries.coverage
    devices = cov["device_id"].n_unique()
    version = meta.get("nsys_version")
    backend = meta.get("backend", "?") + (f" (nsys {version})" if version else "")
    plural = "s" if devices != 1 else ""
    return (
        f"{meta.get('source_path', '')}\nbackend {backend} · {devices} device{plural} · "
        f"{int(cov['ops'].sum()):,} ops · {unit} {_ms(int(cov['time_ns'].sum()))} ms"
    )


def _coverage(cov: pl.DataFrame, unit: str) -> str:
    """Share of time inside ranges, and why the rest is not."""
    total = int(cov["time_ns"].sum())
    if total == 0:
        return f"Coverage: no {unit} in this capture."
    sums = cov.group_by("attribution").agg(pl.col("time_ns").sum())
    by = {str(k): int(v) for k, v in sums.iter_rows()}
    attributed = by.get("range", 0) + by.get("window", 0)
    line = f"Coverage: {_pct(attributed, total)} of {unit} attributed to ranges"
    details = [f"{_pct(by[k], total)} {text}" for k, text in _REASONS.items() if by.get(k)]
    return line + (" (" + "; ".join(details) + ")" if details else "") + "."


def _known_shares(summaries: Summaries) -> str:
    """How much of the time has a step, a phase and a module."""
    parts = []
    for label, table, key in (
        ("a step", summaries.by_step, "step"),
        ("a phase", summaries.by_phase, "phase"),
        ("a module", summaries.by_module, "module"),
    ):
        total = int(table["time_ns"].sum())
        known = int(table.filter(pl.col(key).is_not_null())["time_ns"].sum())
        parts.append(f"{_pct(known, total) if total else '0.0%'} has {label}")
    return "Of all time, " + ", ".join(parts) + "."


def _section(title: str, table: pl.DataFrame, keys: Sequence[str], top: int) -> str:
    """Sum over devices, then show the `top` rows by time with their share."""
    if table.is_empty():
        return ""
    merged = (
        table.group_by(keys)
        .agg(pl.col("ops").sum(), pl.col("time_ns").sum())
        .with_columns((pl.col("time_ns") / pl.col("time_ns").sum()).alias("share"))
        .sort(["time_ns", *keys], descending=[True, *[False] * len(keys)], nulls_last=True)
    )
    rows = [
        [
            _row_label([r[k] for k in keys]),
            f"{r['ops']:,}",
            _ms(r["time_ns"]),
            f"{100 * r['share']:.1f}%",
        ]
        for r in merged.head(top).iter_rows(named=True)
    ]
    more = merged.height - top
    text = _grid(title, ["ops", "ms", "share"], rows)
    return text + (f"\n  ... {more} more" if more > 0 else "")


def _grid(title: str, headers: list[str], rows: list[list[str]]) -> str:
    width = max([len(title)] + [2 + len(r[0]) for r in rows])
    widths = [max(len(h), *(len(r[i + 1]) for r in rows)) for i, h in enumerate(headers)]
    head = "".join("  " + h.rjust(w) for h, w in zip(headers, widths, strict=True))
    cells = [title.ljust(width) + head]
    for r in rows:
        numbers = "".join("  " + c.rjust(w) for c, w in zip(r[1:], widths, strict=True))
        cells.append(("  " + r[0]).ljust(width) + numbers)
    return "\n".join(cells)


def _row_label(values: list[object]) -> str:
    """`first (second)`, e.g. `transformer.h.0.attn (GPT2Attention)`."""
    head = _label(values[0])
    rest = [_label(v) for v in values[1:] if v is not None]
    return f"{head} ({', '.join(rest)})" if rest else head


def _label(value: object) -> str:
    if value is None:
        return _NONE
    text = "(root)" if value == "" else str(value)
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.3f}"


def _pct(part: int, total: int) -> str:
    share = 100 * part / total
    return "<0.1%" if 0 < share < 0.05 else f"{share:.1f}%"
