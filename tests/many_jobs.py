"""Several reports attributed as `nsysmap attribute A B ...` does, without a cluster:
each attributed, ranked, their tables and findings made and written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nsysmap.many.collect import output_tables
from nsysmap.many.rank_findings import job_findings
from nsysmap.many.rank_ids import assign_ranks
from nsysmap.many.ranks_section import rank_report
from nsysmap.many.ranks_text import findings, terminal_summary
from nsysmap.many.task import OK, attribute_one
from nsysmap.many.write import RankParts, ranks_manifest
from nsysmap.output.writer import write_outputs


def ranked_job(paths: list[Path], root: Path) -> dict[str, Any]:
    """The reports at `paths` attributed (each must succeed) into `root`/out: its
    folder, tables, manifest, terminal summary and `nsysmap report`'s Markdown."""
    outcomes = [attribute_one(i, str(p), str(root / "work"), {}) for i, p in enumerate(paths)]
    assert [o.status for o in outcomes] == [OK] * len(paths), [o.error for o in outcomes]
    ranks, rule = assign_ranks(outcomes)
    tables = output_tables(outcomes, ranks)
    tables["findings"] = job_findings(outcomes, ranks, tables)
    manifest = ranks_manifest(outcomes, ranks, tables, rank_rule=rule, options={}, cluster={})
    out = root / "out"
    write_outputs(tables, manifest, out, ops=RankParts(ranks), ranked=True)
    return {
        "out": out,
        "tables": tables,
        "manifest": manifest,
        "terminal": terminal_summary(findings(manifest, tables)),
        "markdown": rank_report(out),
    }
