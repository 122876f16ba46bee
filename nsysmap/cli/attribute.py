"""`nsysmap attribute REPORT [-o DIR]`: attribute an existing report and write the outputs."""

from __future__ import annotations

from pathlib import Path

import click

from nsysmap.cli.options import output_option
from nsysmap.pipeline import analyse_file


@click.command("attribute")
@click.argument("report", type=click.Path(path_type=Path))
@output_option("out/<report name>")
@click.option("--quiet", is_flag=True, help="Do not print the summary.")
def attribute_command(report: Path, out_dir: Path | None, quiet: bool) -> None:
    """Attribute every GPU operation in REPORT to its step, phase and module.

    REPORT is an nsys SQLite export (.sqlite), an nsys report (.nsys-rep,
    exported with `nsys export` when nsys is on PATH) or a torch.profiler
    trace (.json, .json.gz). Writes Parquet tables and manifest.json.
    """
    target = out_dir or Path("out") / report.name.split(".")[0]
    analysis = analyse_file(report, target, options={"command": "attribute"})
    if not quiet:
        click.echo(analysis.summary_text, nl=False)
    click.echo(f"Wrote {len(analysis.manifest['tables'])} tables and manifest.json to {target}")
