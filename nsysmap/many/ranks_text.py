"""The cross-rank summary, as terminal text and as a Markdown section (pure).

Both say the same: what was attributed and what failed, time per rank, the
slowest rank against the median, the straggler cost, and the modules whose
time differs most between ranks; each answer names the rank and the steps
it describes (the steps every rank has in `rank_steps`). Those answers leave
warm-up work out (nsysmap.many.measured); a line says how much, when any.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl

from nsysmap.core.inert import markdown_cell, markdown_code, markdown_text, terminal_text
from nsysmap.core.scalars import to_float
from nsysmap.core.units import cpu_trace, unrecorded_gpu_work
from nsysmap.many.measured import left_out

MS = 1e6
SHOWN_RANKS = 16  # more ranks than this: the slowest ones only
SHOWN_MODULES = 5
# The slow layer: the deepest module whose inclusive excess over the median is
# at least this share of the largest (the root's excess includes everything).
LAYER_SHARE = 0.9


@dataclass(frozen=True)
class Findings:
    """What the summary says, computed once for both renderings."""

    manifest: dict[str, Any]
    rank_comm: pl.DataFrame
    stragglers: pl.DataFrame
    modules: pl.DataFrame
    slowest: dict[str, Any] | None  # rank, compute_ns, median_ns
    layer: dict[str, Any] | None  # a rank_module row
    steps: str = "the profile"  # the steps the answers describe: "steps 1-3"
    warmup: dict[str, int] | None = None  # ops, time_ns, ranks: the warm-up left out


def findings(manifest: dict[str, Any], tables: dict[str, pl.DataFrame]) -> Findings:
    """The findings from a manifest and the tables of a multi-rank output."""
    comm = tables["rank_comm"]
    slowest = None
    if not comm.is_empty():
        top = comm.sort(["compute_ns", "rank"], descending=[True, False]).row(0, named=True)
        slowest = {**top, "median_ns": to_float(comm["compute_ns"].median())}
    modules = tables["rank_module_phase"].filter(pl.col("excess_ns") > 0).head(SHOWN_MODULES)
    layer = slow_layer(tables["rank_module"])
    steps = steps_said(tables.get("rank_steps"))
    warmup = left_out(tables.get("ranks"), comm)
    return Findings(manifest, comm, tables["stragglers"], modules, slowest, layer, steps, warmup)


def warmup_line(f: Findings) -> str | None:
    """What the answers across ranks leave out, when some work was warm-up."""
    w = f.warmup
    if w is None:
        return None
    return (
        f"Warm-up left out, as in each rank's findings: {w['ops']:,} operations, "
        f"{_ms(w['time_ns'])} ms in {w['ranks']} rank(s) (each rank's own tables keep it)."
    )


def steps_said(rank_steps: pl.DataFrame | None) -> str:
    """The steps of the ranks' operations, in words: "steps 1-3", "step 2", "steps 1, 3 and
    5" (and "the time outside steps" when some is), or "the profile" when none is numbered."""
    if rank_steps is None or rank_steps.is_empty():
        return "the profile"
    numbered = sorted(int(s) for s in rank_steps["step"].drop_nulls().unique())
    outside = rank_steps["step"].null_count() > 0
    if not numbered:
        return "the profile (no steps)"
    span = _step_span(numbered)
    return f"{span} and the time outside steps" if outside else span


def _step_span(steps: list[int]) -> str:
    if len(steps) == 1:
        return f"step {steps[0]}"
    if steps == list(range(steps[0], steps[-1] + 1)):
        return f"steps {steps[0]}-{steps[-1]}"
    shown = [str(s) for s in steps[:SHOWN_MODULES]]
    more = "" if len(steps) <= SHOWN_MODULES else f" and {len(steps) - SHOWN_MODULES} more"
    return f"steps {', '.join(shown)}{more}"


def slow_layer(rank_module: pl.DataFrame) -> dict[str, Any] | None:
    """The deepest module holding most of the largest difference between ranks."""
    found = rank_module.filter(pl.col("module").is_not_null() & (pl.col("excess_ns") > 0))
    if found.is_empty():
        return None
    near = found.filter(pl.col("excess_ns") >= LAYER_SHARE * to_float(found["excess_ns"].max()))
    depth = (
        pl.when(pl.col("module") == "")
        .then(0)
        .otherwise(pl.col("module").str.count_matches(r"\.") + 1)
    )
    deepest = near.with_columns(depth.alias("depth")).sort(
        ["depth", "excess_ns", "module"], descending=[True, True, False]
    )
    return deepest.row(0, named=True)


def layer_line(f: Findings, name: Callable[[str], str] = terminal_text) -> str | None:
    """The slowest layer; `name` shows its module's name (nsysmap.core.inert)."""
    row = f.layer
    if row is None:
        return None
    return (
        f"Slowest layer: {_module_name({**row, 'phase': ''}, name).strip()} on rank "
        f"{row['slowest_rank']}: {_ms(row['max_ns'])} ms with the modules inside it over "
        f"{f.steps}, against a median of {_ms(row['median_ns'])} ms (+{_ms(row['excess_ns'])} ms)."
    )


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / MS:,.3f}"


def _failed(manifest: dict[str, Any]) -> list[str]:
    """One line per failed report, naming it (error messages mostly start with the path)."""
    lines = []
    for entry in manifest["inputs"]:
        if entry["status"] == "ok":
            continue
        error = entry["error"] or "failed"
        said = error if error.startswith(entry["path"]) else f"{entry['path']}: {error}"
        lines.append(f"{said} (exit code {entry['exit_code']})")
    return lines


NOT_ONE_JOB = "these reports may not be the ranks of one job"


def not_one_job(manifest: dict[str, Any]) -> str | None:
    """The doubts that the reports are one job's ranks, on one line (None: there are none)."""
    found = manifest.get("one_job_doubts") or []
    return f"{NOT_ONE_JOB}: {'; '.join(found)}" if found else None


def job_line(f: Findings) -> str | None:
    """`nsysmap run` on a job where a rank failed: which, and with what (None otherwise)."""
    options = f.manifest.get("options") or {}
    said = options.get("first_failure")
    if not said:
        return None
    return f"The job failed: {said}."


def headline(f: Findings) -> str:
    m = f.manifest
    done = m["reports"] - m["failed"]
    return (
        f"{m['reports']} reports, {done} attributed, {m['failed']} failed; "
        f"{f.rank_comm.height} ranks, {m['rank_rule']}"
    )


def slowest_line(f: Findings) -> str | None:
    s = f.slowest
    if s is None or f.rank_comm.height < 2:
        return None
    extra = s["compute_ns"] - s["median_ns"]
    if extra <= 0:
        return f"No rank computes longer than the median ({_ms(s['median_ns'])} ms)."
    share = f" ({extra / s['median_ns']:+.1%})" if s["median_ns"] else ""
    return (
        f"Slowest rank: {s['rank']}, compute {_ms(s['compute_ns'])} ms over {f.steps} against "
        f"a median of {_ms(s['median_ns'])} ms: {_ms(extra)} ms more{share}."
    )


def straggler_line(f: Findings) -> str | None:
    steps = f.stragglers.filter(pl.col("ranks") > 1)
    if steps.is_empty():
        return None
    cost = to_float(steps["straggler_cost_ns"].sum())
    counts = steps["slowest_rank"].value_counts(sort=True)
    rank, times = counts.row(0)
    fastest = steps["fastest_rank"].mode().sort()[0]
    worst = steps.sort(["straggler_cost_ns", "step"], descending=[True, False]).row(0, named=True)
    where = "outside steps" if worst["step"] is None else f"in step {worst['step']}"
    return (
        f"Straggler cost: {_ms(cost)} ms over {steps.height} step(s) ({f.steps}): what the "
        f"fastest rank (mostly {fastest}) waits in collectives for the slowest (rank {rank} in "
        f"{times} of {steps.height} steps); the most {where}, {_ms(worst['straggler_cost_ns'])} "
        f"ms (rank {worst['slowest_rank']} slowest, rank {worst['fastest_rank']} fastest)."
    )


def _module_name(row: dict[str, Any], name: Callable[[str], str] = terminal_text) -> str:
    """ "path (Class) phase", the names shown by `name` (nsysmap.core.inert)."""
    module = "(no module)" if row["module"] is None else name(row["module"] or "(root)")
    cls = f" ({name(row['module_class'])})" if row["module_class"] else ""
    phase = row["phase"] if row["phase"] is not None else "(no phase)"
    return f"{module}{cls} {phase}"


def terminal_summary(f: Findings) -> str:
    """The summary `nsysmap attribute` prints for several reports."""
    lines = [terminal_text(headline(f))]
    lines += [f"  {terminal_text(said)}" for said in (job_line(f),) if said]
    lines += [f"  failed: {terminal_text(text)}" for text in _failed(f.manifest)]
    doubt = not_one_job(f.manifest)
    lines += [f"  warning: {terminal_text(doubt)}"] if doubt else []
    unrecorded = unrecorded_note(f.manifest)
    lines += [f"  note: {unrecorded}."] if unrecorded else []
    lines += ["", _rank_table_text(f)]
    said = (warmup_line(f), slowest_line(f), layer_line(f), straggler_line(f))
    lines += [line for line in said if line]
    if not f.modules.is_empty():
        lines.append("Largest differences between ranks, by module and phase (max - median):")
        for row in f.modules.iter_rows(named=True):
            lines.append(
                f"  {_module_name(row)}: rank {row['slowest_rank']} {_ms(row['max_ns'])} ms, "
                f"median {_ms(row['median_ns'])} ms, +{_ms(row['excess_ns'])} ms"
            )
    return "\n".join(lines) + "\n"


_RANK_COLUMNS = ("ops", "time_ns", "compute_ns", "comm_ns", "exposed_ns", "collective_wait_ns")
_RANK_HEADERS = ("ops", "GPU ms", "compute ms", "comm ms", "exposed ms", "wait ms")


def _headers(manifest: dict[str, Any]) -> tuple[str, ...]:
    """The rank table's headers: its time is CPU operator self time where every report is
    a trace without GPU work (`cpu_only`)."""
    return ("ops", "CPU ms", *_RANK_HEADERS[2:]) if cpu_only(manifest) else _RANK_HEADERS


def _metas(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The reader's facts of each report attributed (manifest `inputs`: `report_meta`)."""
    inputs = manifest.get("inputs") or []
    metas = [
        i.get("report_meta") for i in inputs if isinstance(i, dict) and i.get("status") == "ok"
    ]
    return [m for m in metas if isinstance(m, dict)]


def cpu_only(manifest: dict[str, Any]) -> bool:
    """Whether every report attributed is a trace without GPU work (CPU operators)."""
    metas = _metas(manifest)
    return bool(metas) and all(cpu_trace(m) for m in metas)


def unrecorded_note(manifest: dict[str, Any]) -> str | None:
    """`unrecorded_gpu_work` of the reports together, where every one is a trace without
    GPU work that launched some (their launch calls summed); else None."""
    metas = _metas(manifest)
    if not metas or not all(unrecorded_gpu_work(m) for m in metas):
        return None
    launches = sum(int(m["cuda_launch_calls"]) for m in metas)
    return unrecorded_gpu_work({"unit_of_work": "cpu_op", "cuda_launch_calls": launches})


def _shown(f: Findings) -> tuple[pl.DataFrame, int]:
    comm = f.rank_comm
    if comm.height <= SHOWN_RANKS:
        return comm, 0
    slow = comm.sort(["compute_ns", "rank"], descending=[True, False]).head(SHOWN_RANKS)
    return slow.sort("rank"), comm.height - SHOWN_RANKS


def _cells(row: dict[str, Any]) -> list[str]:
    return [f"{row['ops']:,}", *(_ms(row[c]) for c in _RANK_COLUMNS[1:])]


def _rank_table_text(f: Findings) -> str:
    shown, hidden = _shown(f)
    rows = [["rank", *_headers(f.manifest)]] + [
        [str(row["rank"]), *_cells(row)] for row in shown.iter_rows(named=True)
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    text = "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
    if hidden:
        text += f"\n  ... and {hidden} faster rank(s) (rank_comm.parquet lists every rank)"
    return text


def markdown_section(f: Findings) -> str:
    """The same as a Markdown section (what `nsysmap report` writes for a multi-rank output)."""
    out = ["## Ranks", "", markdown_text(headline(f) + "."), ""]
    out += [f"{markdown_text(said)}\n" for said in (job_line(f),) if said]
    failed = _failed(f.manifest)
    if failed:
        out += ["Reports that failed:", "", *(f"- {markdown_text(t)}" for t in failed), ""]
    doubts = f.manifest.get("one_job_doubts") or []
    if doubts:
        out += [f"**Warning: {NOT_ONE_JOB}**, so comparing them may mean nothing:", ""]
        out += [*(f"- {markdown_text(d)}" for d in doubts), ""]
    unrecorded = unrecorded_note(f.manifest)
    out += [f"Note: {markdown_text(unrecorded)}.", ""] if unrecorded else []
    shown, hidden = _shown(f)
    out += [
        "| rank | " + " | ".join(_headers(f.manifest)) + " |",
        "|---:" * (len(_RANK_HEADERS) + 1) + "|",
    ]
    out += [
        f"| {row['rank']} | " + " | ".join(_cells(row)) + " |"
        for row in shown.iter_rows(named=True)
    ]
    if hidden:
        out.append(f"\n{hidden} faster rank(s) not shown; `rank_comm.parquet` lists every rank.")
    out.append("")
    lines = (warmup_line(f), slowest_line(f), layer_line(f, markdown_code), straggler_line(f))
    out += [f"{line}\n" for line in lines if line]
    if not f.modules.is_empty():
        out += [
            "### Largest differences between ranks, by module and phase",
            "",
            "| module and phase | slowest rank | max ms | median ms | min ms | excess ms |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        out += [
            f"| {markdown_cell(_module_name(r, markdown_code))} | {r['slowest_rank']} | "
            f"{_ms(r['max_ns'])} | "
            f"{_ms(r['median_ns'])} | {_ms(r['min_ns'])} | {_ms(r['excess_ns'])} |"
            for r in f.modules.iter_rows(named=True)
        ]
        out.append("")
    return "\n".join(out)
