"""The terminal summary: plain text from the summary tables (pure, no printing)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import polars as pl

from nsysmap.attribution.labels import OPERATOR_RANGE
from nsysmap.attribution.paths import PATH_SEPARATOR
from nsysmap.core.inert import distinct_cuts, terminal_text
from nsysmap.core.range_names import PREFIX as NSYSMAP
from nsysmap.core.units import cpu_trace, operation_word, time_unit, unrecorded_gpu_work
from nsysmap.summaries.by_range import FOLDED
from nsysmap.summaries.comm_overlap import overlap_line
from nsysmap.summaries.graph_note import graph_line
from nsysmap.summaries.range_paths import is_user_range
from nsysmap.summaries.summarise import Summaries
from nsysmap.summaries.top_ranges import top_ranges
from nsysmap.waits.text import waits_line

TOP = 10
MAX_LABEL = 72
# A module path: names (numbers as `*` too) joined by dots, no spaces or brackets.
MODULE_PATH = re.compile(r"[\w*]+(\.[\w*]+)+")
# Short names that say nothing (CUTLASS's `Kernel<...>`, cuBLAS's `gemvx::kernel<...>`, its
# `std::enable_if<...>::type gemvx::kernel<...>` shortened to `enable_if`): such
# kernels are named by their qualified name and first template argument instead.
GENERIC_SHORT = r"^(?i:kernel\d*|device_kernel|enable_if)$"
_QUALIFIED = r"((?:\w+::)*(?i:kernel\d*|device_kernel)<[^<>,(]*)([>,<(])"
_NONE = "(none)"
# The operations of by_kernel that are no kernels, as the table's title names them.
_NOT_KERNELS = {"memcpy": "copies", "memset": "memsets", "graph": "CUDA graph replays"}
# The row of operations without a phase or a module, named as the report names it.
NO_PHASE = "(outside every phase)"
NO_MODULE = "(no module)"
_REASONS = {
    "other_thread": "given step/phase from a range on another thread of the process",
    "no_range": "launched outside any range",
    "no_launch": "no launch call in the capture",
    "ambiguous_launch": "launch ambiguous: several launch calls share correlation ids",
}
# What gives steps, phases and modules to a profile that lacks them (docs/outputs.md).
_HOW = {
    "all": "`nsysmap run SCRIPT` (all three)",
    "scopes": (
        "NVTX / `record_function` ranges named `step N`, `forward`, `backward`, `optimizer` "
        "(steps, phases)"
    ),
    "modules": "torch.profiler `with_modules=True` (modules)",
    "modules_need_stack": (
        "torch.profiler `with_stack=True` beside `with_modules=True` (this trace has "
        "with_modules but no module frames: PyTorch writes them only with with_stack)"
    ),
    "operators": "`emit_nvtx` (operator ranges)",
}


def render_summary(
    summaries: Summaries,
    meta: dict[str, str],
    *,
    top: int = TOP,
    work: pl.DataFrame | None = None,
) -> str:
    """A readable breakdown: coverage, phases, modules, kernels, categories. `work`: each
    stream's time of work other than communication, by which the waits' line picks the
    busiest stream (nsysmap.waits.text.stream_work)."""
    cpu = cpu_trace(meta)
    unit = time_unit(cpu)
    op_word = operation_word(cpu)
    parts = [
        _header(summaries, meta, unit) + _notes(meta),
        _coverage(summaries.coverage, unit)
        + "\n"
        + _contents(summaries, meta, unit)
        + _closed(meta),
        _compilation(meta, unit, int(summaries.coverage["time_ns"].sum())),
        _section(f"{unit} by phase", summaries.by_phase, ["phase"], top, NO_PHASE),
        _section("Top modules", summaries.by_module, ["module", "module_class"], top, NO_MODULE),
        _ranges(summaries.by_range, top),
        _section(
            _kernels_title(summaries.by_kernel, op_word),
            _kernel_names(summaries.by_kernel),
            ["short_name", "category"],
            top,
        ),
        _section("Categories", summaries.by_category, ["category"], top),
        graph_line(meta, int(summaries.coverage["time_ns"].sum())),
        overlap_line(summaries.overlap),
        waits_line(summaries.waits["stream_idle"], summaries.waits["idle"], work),
    ]
    return "\n\n".join(p for p in parts if p) + "\n"


def _header(summaries: Summaries, meta: dict[str, str], unit: str) -> str:
    cov = summaries.coverage
    devices = cov["device_id"].n_unique()
    version = meta.get("nsys_version")
    backend = meta.get("backend", "?") + (f" (nsys {version})" if version else "")
    plural = "s" if devices != 1 else ""
    source = meta.get("source_path") or "(not recorded)"
    return (
        f"input {terminal_text(source)}\nbackend {backend} · {devices} device{plural} · "
        f"{int(cov['ops'].sum()):,} ops · {unit} {_ms(int(cov['time_ns'].sum()))} ms"
    )


# Meta keys whose value is a sentence the reader wants shown (what it left out).
NOTE_KEYS = ("events_skipped_detail",)


def _notes(meta: dict[str, str]) -> str:
    notes = [terminal_text(meta[key]) for key in NOTE_KEYS if meta.get(key)]
    unrecorded = unrecorded_gpu_work(meta)
    notes += [unrecorded] if unrecorded else []
    return "".join(f"\nNote: {note}." for note in notes)


def _coverage(cov: pl.DataFrame, unit: str) -> str:
    """Share of time inside ranges, and why the rest is not."""
    total = int(cov["time_ns"].sum())
    if total == 0:
        return f"Coverage: no {unit} in this capture."
    sums = cov.group_by("attribution").agg(pl.col("time_ns").sum())
    by = {str(k): int(v) for k, v in sums.iter_rows()}
    attributed = by.get("range", 0) + by.get("other_thread", 0)
    line = f"Coverage: {_pct(attributed, total)} of {unit} attributed to ranges"
    details = [f"{_pct(by[k], total)} {text}" for k, text in _REASONS.items() if by.get(k)]
    return line + (" (" + "; ".join(details) + ")" if details else "") + "."


def _closed(meta: dict[str, str]) -> str:
    """A line on ranges that had no end, when there were any."""
    n = int(meta.get("ranges_open_at_end") or 0)
    if not n:
        return ""
    return (
        f"\n{n:,} range{'s' * (n != 1)} had no end (left open at capture end or by an "
        "exception); closed where the enclosing range ends, else at the thread's last event."
    )


def _compilation(meta: dict[str, str], unit: str, total: int) -> str:
    """torch.compile: compilation inside the capture, kept apart (see docs/compile.md)."""
    if "compile_events" not in meta:
        return ""
    events, wall = int(meta["compile_events"]), int(meta["compile_wall_ns"])
    graphs = int(meta.get("compiled_graphs", "0"))
    traced = f"{graphs} compiled graph{'s' * (graphs != 1)} traced to modules. " if graphs else ""
    if events == 0:
        return f"Compilation: {traced}No compilation inside the captured steps."
    inside = int(meta.get("compile_op_ns", "0"))
    share = _pct(inside, total) if total else "0.0%"
    return (
        f"Compilation: {traced}{events} compilation{'s' * (events != 1)} inside the captured "
        f"steps, {_ms(wall)} ms wall; {_ms(inside)} ms ({share}) "
        f"of {unit} ran inside them.\n"
        "Warning: the profiled steps still compile (recompiles?); see docs/compile.md."
    )


def _contents(summaries: Summaries, meta: dict[str, str], unit: str) -> str:
    """How much of the time has a step, a phase and a module; or, when the profile
    lacks one of them, what it carries and how to get the rest (one line); then what
    the tables' shares are of."""
    shares = {}
    for label, table, key in (
        ("step", summaries.by_step, "step"),
        ("phase", summaries.by_phase, "phase"),
        ("module", summaries.by_module, "module"),
    ):
        total = int(table["time_ns"].sum())
        known = int(table.filter(pl.col(key).is_not_null())["time_ns"].sum())
        shares[label] = (known, total)
    if all(known for known, _ in shares.values()):
        parts = [f"{_pct(*shares[label])} has a {label}" for label in shares]
        return (
            "Of all time, " + ", ".join(parts) + ".\nShares below are of all that time, devices "
            "together (`nsysmap report` divides by the time in steps)."
        )
    kinds = range_kinds(summaries)
    has = [*kinds, *(f"{k}s ({_pct(*v)})" for k, v in shares.items() if v[0])]
    # no step labels, yet the structure may find steps (a range around both passes)
    lacks = [
        "step ranges" if k == "step" else f"{k}s" for k, (known, _) in shares.items() if not known
    ]
    how = [_HOW["all"]]
    if not (shares["step"][0] and shares["phase"][0]):
        how.append(_HOW["scopes"])
    if not shares["module"][0]:
        how.append(_HOW["modules_need_stack"] if _modules_without_stack(meta) else _HOW["modules"])
    if "PyTorch operator ranges" not in kinds:
        how.append(_HOW["operators"])
    carried = ", ".join(has) if has else "no ranges"
    return (
        f"Profile: {carried}; no {', no '.join(lacks)}. To get them: {', '.join(how)}.\n"
        f"Shares below are of all {unit}, devices together."
    )


def _modules_without_stack(meta: dict[str, str]) -> bool:
    """A trace recorded with_modules=True but no module frames (with_stack was off)."""
    return meta.get("with_modules") == "1" and meta.get("module_source") is None


def range_kinds(summaries: Summaries) -> list[str]:
    """The kinds of range the profile's operations were launched in, as words."""
    names = summaries.by_range["range_name"].drop_nulls()
    names = names.filter(names != FOLDED)
    if names.is_empty():
        launched = summaries.coverage.filter(pl.col("attribution") == "range")["ops"].sum()
        return ["ranges"] if launched else []
    own, user, operator = _range_flags(names)
    found = {"nsysmap's ranges": own, "user ranges": user, "PyTorch operator ranges": operator}
    return [kind for kind, present in found.items() if present]


def _range_flags(names: pl.Series) -> tuple[bool, bool, bool]:
    """Whether the range names hold nsysmap's, the user's, and PyTorch operator ranges."""
    if names.is_empty():
        return False, False, False
    kinds = pl.DataFrame({"name": names}).select(
        own=pl.col("name").str.starts_with(NSYSMAP).any(),
        user=is_user_range(pl.col("name")).any(),
        operator=pl.col("name").str.contains(OPERATOR_RANGE).any(),
    )
    own, user, operator = kinds.row(0)
    return bool(own), bool(user), bool(operator)


def _ranges(table: pl.DataFrame, top: int) -> str:
    """The ranges with the most time inside them (nsysmap.summaries.top_ranges chooses)."""
    chosen = top_ranges(table, top)
    if chosen is None:
        return ""
    total = chosen.total_ns
    paths = chosen.rows["range_path"].to_list()
    labels = distinct_cuts(paths, [_path_label(p) for p in paths], MAX_LABEL)
    rows = [
        [
            terminal_text(label),
            f"{r['calls']:,}",
            _ms(r["time_ns"]),
            _ms(r["inclusive_ns"]),
            _pct(r["inclusive_ns"], total) if total else "0.0%",
        ]
        for label, r in zip(labels, chosen.rows.iter_rows(named=True), strict=True)
    ]
    headers = ["calls", "own ms", "inside ms", "share"]
    text = _grid("Top ranges (inside: with the ranges below)", headers, rows)
    text += f"\n  ... {chosen.more} more in by_range.parquet" if chosen.more > 0 else ""
    outside = chosen.outside_ns
    if not outside or total <= 0:
        return text
    return text + (
        f"\n  {_ms(outside)} ms ({_pct(outside, total)}) is inside none of these"
        " ranges: launched outside every range, or inside ranges not listed here"
        " (by_range.parquet has them all)"
    )


def _path_label(path: str) -> str:
    """A range path cut from the left at a separator to fit MAX_LABEL characters."""
    if len(path) <= MAX_LABEL:
        return path
    names, kept = path.split(PATH_SEPARATOR), list[str]()
    while names and len(PATH_SEPARATOR.join(["…", names[-1], *kept])) <= MAX_LABEL:
        kept.insert(0, names.pop())
    if not kept:  # the last name alone is too long: its beginning
        head = "" if len(names) == 1 else "…" + PATH_SEPARATOR
        return head + names[-1][: MAX_LABEL - len(head) - 1].rstrip() + "…"
    return PATH_SEPARATOR.join(["…", *kept])


def _section(
    title: str, table: pl.DataFrame, keys: Sequence[str], top: int, missing: str = _NONE
) -> str:
    """Sum over devices, then show the `top` rows by time with their share (`missing`
    labels the row of operations without a key, e.g. outside every phase)."""
    if table.is_empty() or table[keys[0]].is_null().all():
        return ""  # nothing but the null group
    merged = (
        table.group_by(keys)
        .agg(pl.col("ops").sum(), pl.col("time_ns").sum())
        .with_columns((pl.col("time_ns") / pl.col("time_ns").sum()).alias("share"))
        .sort(["time_ns", *keys], descending=[True, *[False] * len(keys)], nulls_last=True)
    )
    shown = merged.head(top)
    names = [_text(value, missing) for value in shown[keys[0]].to_list()]
    heads = distinct_cuts(names, [_label(name) for name in names], MAX_LABEL)
    rows = [
        [
            _row_label(head, [r[k] for k in keys[1:]]),
            f"{r['ops']:,}",
            _ms(r["time_ns"]),
            f"{100 * r['share']:.1f}%",
        ]
        for head, r in zip(heads, shown.iter_rows(named=True), strict=True)
    ]
    more = merged.height - top
    text = _grid(title, ["ops", "ms", "share"], rows)
    return text + (f"\n  ... {more} more" if more > 0 else "")


def _kernels_title(by_kernel: pl.DataFrame, op_word: str) -> str:
    """ "Top kernels", or what else the table lists (copies and sets are no kernels)."""
    kinds = set(by_kernel["kind"].cast(pl.String).unique().to_list())
    words = [op_word, *(word for kind, word in _NOT_KERNELS.items() if kind in kinds)]
    return "Top " + (f"{', '.join(words[:-1])} and {words[-1]}" if len(words) > 1 else op_word)


def _kernel_names(by_kernel: pl.DataFrame) -> pl.DataFrame:
    """by_kernel with generic short names (`Kernel`) replaced by what tells the kernels
    apart: `cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>`; a category
    with the number of kernels a short name stands for, where it is more than one."""
    head = pl.col("name").str.extract(_QUALIFIED, 1)
    closed = pl.col("name").str.extract(_QUALIFIED, 2) == ">"
    label = head + pl.when(closed).then(pl.lit(">")).otherwise(pl.lit("…>"))
    generic = pl.col("short_name").str.contains(GENERIC_SHORT) & head.is_not_null()
    named = by_kernel.with_columns(
        short_name=pl.when(generic).then(label).otherwise(pl.col("short_name"))
    )
    # A short name over several kernels (template instances: `par_ranged2d_kernel<PdV_kernel>`,
    # `<advec_cell_kernel>`, ...) says how many, beside its category: report.md names
    # them apart, and its top kernel is one of them.
    kernels = pl.col("name").n_unique().over("short_name", "category")
    many = pl.format("{}, {} kernels", pl.col("category"), kernels)
    return named.with_columns(category=pl.when(kernels > 1).then(many).otherwise("category"))


def _grid(title: str, headers: list[str], rows: list[list[str]]) -> str:
    width = max([len(title)] + [2 + len(r[0]) for r in rows])
    widths = [max(len(h), *(len(r[i + 1]) for r in rows)) for i, h in enumerate(headers)]
    head = "".join("  " + h.rjust(w) for h, w in zip(headers, widths, strict=True))
    cells = [title.ljust(width) + head]
    for r in rows:
        numbers = "".join("  " + c.rjust(w) for c, w in zip(r[1:], widths, strict=True))
        cells.append(("  " + r[0]).ljust(width) + numbers)
    return "\n".join(cells)


def _row_label(head: str, rest: list[object]) -> str:
    """`first (second)`, e.g. `transformer.h.0.attn (GPT2Attention)`: `head`, the first
    key's label (its name as cut, or the row of `missing`), then the other keys'."""
    shown = [terminal_text(_label(_text(v))) for v in rest if v is not None]
    first = terminal_text(head)
    return f"{first} ({', '.join(shown)})" if shown else first


def _text(value: object, missing: str = _NONE) -> str:
    """A key's value as its row names it: `missing` for none, `(root)` for the root module."""
    if value is None:
        return missing
    return "(root)" if value == "" else str(value)


def _label(text: str) -> str:
    """A row's name within MAX_LABEL characters: a module path (MODULE_PATH) cut from the
    left at a dot, so that its innermost names stay (`…FeedForward_9.Linear_27`: two rows of one
    parent would otherwise read the same), anything else cut at its end."""
    if len(text) <= MAX_LABEL:
        return text
    path = MODULE_PATH.fullmatch(text) is not None  # not a kernel's name with a dot in it
    cuts = [i + 1 for i, c in enumerate(text) if c == "." and len(text) - i <= MAX_LABEL]
    if path and cuts:
        return "…" + text[cuts[0] :]
    return text[: MAX_LABEL - 1] + "…"


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.3f}"


def _pct(part: int, total: int) -> str:
    share = 100 * part / total
    return "<0.1%" if 0 < share < 0.05 else f"{share:.1f}%"
