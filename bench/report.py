"""The benchmark's results as Markdown tables."""

from __future__ import annotations

# The flow's stages in the order the table shows them; any other stage the flow
# times (bench/nsysmap_run.py passes on all of them) follows, in its own order.
STAGES = ("read", "normalise", "attribute", "summarise", "infer", "findings", "write", "hash")


def stage_names(results: dict) -> list[str]:
    """Every stage timed at any size: the known ones in STAGES order, then the others."""
    seen = dict.fromkeys(s for size in results["sizes"] for s in size.get("stages", {}))
    return [s for s in STAGES if s in seen] + [s for s in seen if s not in STAGES]


def size_text(size: dict) -> str:
    """The first cell of a size's rows: its kernels, or what the export is."""
    return f"{size['kernels']:,}" + (f" ({size['label']})" if size.get("label") else "")


def _floor(size: dict) -> tuple[str, float] | None:
    floors = [(e, r["wall_s"]["median"]) for e, r in size["runs"].items() if e.startswith("floor")]
    return min(floors, key=lambda f: f[1]) if floors else None


def _bytecode(m: dict) -> str:
    """How nsysmap's modules were loaded (bench.measure.compile_packages)."""
    compiled = m.get("bytecode_compiled")
    if compiled is None:  # results written before the benchmark compiled them
        return "bytecode not recorded"
    return "compiled to bytecode" if compiled else "not all compiled to bytecode"


def markdown(results: dict) -> str:
    """Machine, one row per size and engine, nsysmap's stages, agreement."""
    m = results["machine"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB; Python {m['python']}, "
        f"Polars {m['polars']}, PyArrow {m['pyarrow']}, adbc-driver-sqlite "
        f"{m['adbc-driver-sqlite']}, connectorx {m['connectorx']}, SQLite {m['sqlite (stdlib)']} "
        f"(SQL engine); nsysmap {_bytecode(m)}. Started {results['started']}.",
        "",
        "| kernels | ranges | engine | runs | wall, median (s) | spread (min..max) "
        "| peak RSS (GB) | µs per kernel | × floor |",
        "|---:|---:|---|---:|---:|---|---:|---:|---:|",
    ]
    for size in results["sizes"]:
        floor = _floor(size)
        for engine, run in size["runs"].items():
            wall, rss = run["wall_s"], run["peak_rss_gb"]
            ratio = f"{wall['median'] / floor[1]:.2f}" if floor else "-"
            lines.append(
                f"| {size_text(size)} | {size['ranges']:,} | {engine} | {wall['n']} "
                f"| {wall['median']:.2f} | {wall['min']:.2f}..{wall['max']:.2f} "
                f"| {rss['median']:.2f} | {1e6 * wall['median'] / size['kernels']:.2f} | {ratio} |"
            )
    lines += _read_as_lines(results)
    lines += _stage_lines(results)
    for size in results["sizes"]:
        if "same_totals_per_range" in size:
            same = "identical" if size["same_totals_per_range"] else "DIFFERENT"
            lines.append(
                f"- {size_text(size)} kernels: nsysmap and SQL totals per range "
                f"({size['ranges_compared']:,} ranges hit, and time outside any range): {same}"
            )
    return "\n".join(lines) + "\n"


def read_as_text(read_as: dict[str, str] | None) -> str:
    """How nsysmap read an export, from bench/nsysmap_run.py's `read_as`."""
    if read_as is None:
        return "not recorded"
    parts = []
    if "processes" in read_as:
        parts.append(f"{read_as['processes']} processes one at a time")
    if "windows" in read_as:
        parts.append(f"{read_as['windows']} time windows one at a time")
    text = ", ".join(parts) or "whole"
    return text + (f" (time windows refused: {read_as['refused']})" if "refused" in read_as else "")


def _read_as_lines(results: dict) -> list[str]:
    """How each nsysmap engine read each export."""
    lines = []
    for size in results["sizes"]:
        for engine, run in size["runs"].items():
            if run.get("read_as") is not None:  # engines that do not say: the floors
                lines.append(f"- {size_text(size)}, {engine}: {read_as_text(run['read_as'])}")
    return ["", "How nsysmap read each export:", "", *lines] if lines else []


def _stage_lines(results: dict) -> list[str]:
    """nsysmap's median seconds per stage, one row per size."""
    names = stage_names(results)
    if not names:
        return ["", "nsysmap stages: not run (nsysmap is not among --engines)", ""]
    lines = ["", "nsysmap stages, median seconds (hash runs in the background, beside the others):"]
    lines += ["", "| kernels | " + " | ".join(names) + " |", "|---:|" + "---:|" * len(names)]
    for size in results["sizes"]:
        if size["stages"]:
            cells = [
                f"{size['stages'][s]['median']:.2f}" if s in size["stages"] else "-" for s in names
            ]
            lines.append(f"| {size_text(size)} | " + " | ".join(cells) + " |")
    return [*lines, ""]
