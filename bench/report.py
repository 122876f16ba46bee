"""The benchmark's results as Markdown tables."""

from __future__ import annotations

STAGES = ("read", "normalise", "attribute", "summarise", "write", "hash")


def _floor(size: dict) -> tuple[str, float] | None:
    floors = [(e, r["wall_s"]["median"]) for e, r in size["runs"].items() if e.startswith("floor")]
    return min(floors, key=lambda f: f[1]) if floors else None


def markdown(results: dict) -> str:
    """Machine, one row per size and engine, nsysmap's stages, agreement."""
    m = results["machine"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB; Python {m['python']}, "
        f"Polars {m['polars']}, PyArrow {m['pyarrow']}, adbc-driver-sqlite "
        f"{m['adbc-driver-sqlite']}, connectorx {m['connectorx']}, SQLite {m['sqlite (stdlib)']} "
        f"(SQL engine). Started {results['started']}.",
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
                f"| {size['kernels']:,} | {size['ranges']:,} | {engine} | {wall['n']} "
                f"| {wall['median']:.2f} | {wall['min']:.2f}..{wall['max']:.2f} "
                f"| {rss['median']:.2f} | {1e6 * wall['median'] / size['kernels']:.2f} | {ratio} |"
            )
    lines += _stage_lines(results)
    for size in results["sizes"]:
        if "same_totals_per_range" in size:
            same = "identical" if size["same_totals_per_range"] else "DIFFERENT"
            lines.append(
                f"- {size['kernels']:,} kernels: nsysmap and SQL totals per range "
                f"({size['ranges_compared']:,} ranges hit, and time outside any range): {same}"
            )
    return "\n".join(lines) + "\n"


def _stage_lines(results: dict) -> list[str]:
    """nsysmap's median seconds per stage, one row per size."""
    lines = ["", "nsysmap stages, median seconds (hash runs in the background, beside the others):"]
    lines += ["", "| kernels | " + " | ".join(STAGES) + " |", "|---:|" + "---:|" * len(STAGES)]
    for size in results["sizes"]:
        if size["stages"]:
            cells = [
                f"{size['stages'][s]['median']:.2f}" if s in size["stages"] else "-" for s in STAGES
            ]
            lines.append(f"| {size['kernels']:,} | " + " | ".join(cells) + " |")
    return [*lines, ""]
