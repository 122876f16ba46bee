"""Golden outputs: every output table of a sample, as CSV files that diff well."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap.flow.verbs import analyse_file
from nsysmap.output.writer import read_outputs

CHARTS = "report_charts.json"


def attributed_tables(report: Path) -> dict[str, pl.DataFrame]:
    """Run the whole flow on `report` and read back what it wrote."""
    with tempfile.TemporaryDirectory() as tmp:
        analyse_file(report, Path(tmp), options={"command": "attribute"})
        return read_outputs(Path(tmp))


def chart_document(report: Path) -> dict[str, Any]:
    """The data behind every chart of the HTML report of `report` (nsysmap report --html)."""
    from nsysmap.report.build import build_report
    from nsysmap.report.html.charts import missing_charts, report_charts
    from nsysmap.report.report_files import read_run

    with tempfile.TemporaryDirectory() as tmp:
        analyse_file(report, Path(tmp), options={"command": "attribute"})
        findings = build_report(read_run(Path(tmp))).findings
    return {
        "notes": [*findings.notes, *missing_charts(findings)],
        "charts": [chart.to_dict() for chart in report_charts(findings)],
    }


def chart_text(document: dict[str, Any]) -> str:
    """The golden file's text: sorted keys, one value a line."""
    return json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def to_csv_frame(df: pl.DataFrame) -> pl.DataFrame:
    """Enums as strings, floats rounded: a stable text form."""
    return df.with_columns(pl.col(pl.Enum).cast(pl.String), pl.col(pl.Float64).round(9))


def write_golden(report: Path, out_dir: Path) -> None:
    """Write `<table>.csv` for every output table of `report` into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, df in attributed_tables(report).items():
        to_csv_frame(df).write_csv(out_dir / f"{name}.csv")
    (out_dir / CHARTS).write_text(chart_text(chart_document(report)))


def read_golden(out_dir: Path, schema: pl.Schema) -> pl.DataFrame:
    """Read one golden CSV back with the given output schema's types."""
    text_schema = {k: (pl.String if isinstance(v, pl.Enum) else v) for k, v in schema.items()}
    return pl.read_csv(out_dir, schema=text_schema)
