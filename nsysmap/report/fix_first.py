"""What to fix first, as answers.json says it and as report.md shows it (pure).

`read_findings(run_dir, manifest)` reads findings.parquet (None when the
output has none: written before output schema 1.11); `fix_first_answer(table)`
is the answer `findings` of answers.json, the findings in their ranked order
with every column of findings.parquet (docs/outputs.md); `fix_first_section`
renders it as the report's first section, from the answer alone. The rules
themselves are nsysmap.findings (docs/findings.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap.core.findings_schema import (
    BOTH,
    FINDINGS,
    MEASURED,
    STEPS,
    basis_of,
    saving_words,
)
from nsysmap.core.inert import markdown_cell, markdown_code, markdown_text
from nsysmap.report.format import ms, pct, table

ID = "findings"
QUESTION = "What should change first, and how much of each step would it save?"
RULES_DOC = "docs/findings.md"
TITLE = "What to fix first"


def read_findings(run_dir: str | Path, manifest: Mapping[str, Any]) -> pl.DataFrame | None:
    """findings.parquet of an output directory (None when its manifest lists none)."""
    listed = (manifest.get("tables") or {}).get(ID)
    if not listed:
        return None
    table = pl.read_parquet(Path(run_dir) / listed["file"])
    if "per_step" not in table.columns:  # written before output schema 1.13: per step
        table = table.with_columns(per_step=pl.lit(None, pl.Boolean))
    return table.select(FINDINGS.names()).cast(FINDINGS)


def fix_first_answer(findings: pl.DataFrame | None) -> dict[str, Any]:
    """The answer `findings`: every finding, ranked, or why there are none to read."""
    unknown = None
    if findings is None:
        unknown = (
            "no findings.parquet here (written by an nsysmap before output schema 1.11): run "
            "`nsysmap attribute` again for this section"
        )
    rows = [] if findings is None else findings.sort("priority").to_dicts()
    return {
        "id": ID,
        "question": QUESTION,
        "rules": RULES_DOC,
        "findings": rows,
        "unknown": unknown,
    }


def saving_text(row: Mapping[str, Any]) -> str:
    """ "up to 1.234 ms", "about 1.234 ms", or "unknown"."""
    if row["saving_ns_per_step"] is None:
        return "unknown"
    return ("up to " if row["upper_bound"] else "about ") + ms(row["saving_ns_per_step"])


# The headings of the saving and its share, by what the findings' figures are over.
SAVING_COLUMNS = {
    STEPS: ["saving per step", "of the step"],
    MEASURED: ["saving", "of the measured wall time"],
    BOTH: ["saving (per step where steps are measured)", "of the step or measured wall time"],
}


def saving_columns(per_steps: list[bool | None]) -> list[str]:
    """The headings of the saving and its share (SAVING_COLUMNS of their `basis_of`)."""
    return SAVING_COLUMNS[basis_of(per_steps)]


def fix_first_section(answer: Mapping[str, Any]) -> list[str]:
    """The Markdown section: a ranked table, then each finding's evidence, estimate and fix."""
    lines = [f"## {TITLE}", ""]
    if answer.get("unknown"):
        return [*lines, f"Unknown: {markdown_text(answer['unknown'])}.", ""]
    rows = answer["findings"]
    if not rows:
        return [*lines, f"No rule found anything worth fixing (rules: `{answer['rules']}`).", ""]
    per_steps = [r.get("per_step") for r in rows]
    lines += [
        f"Ranked by {saving_words(per_steps)}; where two findings draw on the same time (on"
        " one stream, or a stream idle while communication runs on another), it counts once:"
        " for the more specific finding, else the larger, and the other says it overlaps."
        f" Each rule: `{answer['rules']}`.",
        "",
    ]
    cells = [
        [
            str(r["priority"]),
            markdown_cell(markdown_text(r["title"])),
            markdown_cell(markdown_text(r["place"])),
            saving_text(r),
            pct(r["saving_share"]),
            r["confidence"],
        ]
        for r in rows
    ]
    lines += table(["#", "finding", "where", *saving_columns(per_steps), "confidence"], cells)
    for r in rows:
        lines += [*_details(r), ""]
    return lines


def _details(r: Mapping[str, Any]) -> list[str]:
    """A finding in full; its texts as prose that may quote names (core/inert.py)."""
    t = {key: markdown_text(r[key] or "") for key in PROSE}
    text = [
        f"{r['priority']}. **{t['title']}** ({t['place']}): {t['evidence']}.",
        f"   Estimate: {t['estimate']}"
        + (f"; overlaps {t['overlaps']}." if r["overlaps"] else "."),
        f"   Fix: {t['fix']}.",
        f"   Rows: {t['evidence_rows']}. Rule: {markdown_code(r['doc'])}.",
    ]
    if r["needs"]:
        text.insert(2, f"   Needs: {t['needs']}.")
    return text


# The texts of a finding shown in report.md as prose.
PROSE = ("title", "place", "evidence", "estimate", "overlaps", "fix", "evidence_rows", "needs")
