"""`nsysmap diff RUN_A RUN_B`: two runs compared per phase, module, category and kernel."""

from __future__ import annotations

from pathlib import Path

import click

from nsysmap.diff.compare import compare
from nsysmap.diff.diff_charts import diff_page
from nsysmap.diff.diff_text import render
from nsysmap.output.placement import check_output_dir, check_output_file, write_failed
from nsysmap.report.html.page import plotly_js, write_page
from nsysmap.report.io import read_run

DIFF_PARQUET = "diff.parquet"


@click.command("diff")
@click.argument("run_a", type=click.Path(path_type=Path))
@click.argument("run_b", type=click.Path(path_type=Path))
@click.option(
    "--html",
    "html_file",
    type=click.Path(path_type=Path),
    help="Also write the comparison as one self-contained HTML page.",
)
@click.option(
    "-o",
    "--output",
    "out_dir",
    type=click.Path(path_type=Path),
    help=f"Directory to write {DIFF_PARQUET} into (every level, every row).",
)
@click.option("--quiet", is_flag=True, help="Do not print the comparison.")
def diff_command(
    run_a: Path, run_b: Path, html_file: Path | None, out_dir: Path | None, quiet: bool
) -> None:
    """Compare two output directories (A before, B after), per step, matched by name."""
    a, b = read_run(run_a), read_run(run_b)
    if out_dir is not None:  # every output checked before anything is written
        check_output_file(check_output_dir(out_dir) / DIFF_PARQUET)
    if html_file is not None:
        check_output_file(html_file)
        plotly_js()  # a missing plotly (exit 6) before diff.parquet is written, too
    diff = compare(str(run_a), a.ops, str(run_b), b.ops)
    if not quiet:
        click.echo(render(diff), nl=False)
    if out_dir is not None:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            diff.table().write_parquet(out_dir / DIFF_PARQUET, statistics=True)
        except OSError as exc:
            raise write_failed(out_dir, exc) from None
        click.echo(f"nsysmap: wrote {out_dir / DIFF_PARQUET}", err=True)
    if html_file is not None:
        click.echo(f"nsysmap: wrote {write_page(diff_page(diff), html_file)}", err=True)
