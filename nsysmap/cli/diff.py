"""`nsysmap diff RUN_A RUN_B`: two runs compared per phase, module, category and kernel."""

from __future__ import annotations

from pathlib import Path

import click

from nsysmap.core.errors import Regression
from nsysmap.diff.compare import Diff, compare_runs
from nsysmap.diff.diff_charts import diff_page
from nsysmap.diff.diff_text import render
from nsysmap.diff.fix_check import check, check_lines
from nsysmap.diff.gate import GATED, grown, grown_lines
from nsysmap.output.guard import check_not_over
from nsysmap.output.placement import check_output_dir, check_output_file, write_failed
from nsysmap.output.whole_file import written_whole
from nsysmap.report.html.page import plotly_js, write_page
from nsysmap.report.report_files import read_run

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
@click.option(
    "--fail-above",
    "fail_above",
    type=click.FloatRange(min=0),
    help="Exit with 13 when the time per step, or a row of a --by level, grew more than "
    "this percentage (a CI gate); the rows that did are printed.",
)
@click.option(
    "--by",
    "levels",
    type=click.Choice(GATED),
    multiple=True,
    help="With --fail-above, also check every row of this level (repeatable).",
)
def diff_command(
    run_a: Path,
    run_b: Path,
    html_file: Path | None,
    out_dir: Path | None,
    quiet: bool,
    fail_above: float | None,
    levels: tuple[str, ...],
) -> None:
    """Compare two output directories (A before, B after), per step, matched by name."""
    a, b = read_run(run_a), read_run(run_b)
    reads = [run_a, run_b]
    if out_dir is not None:  # every output checked before anything is written
        table = check_output_file(check_output_dir(out_dir) / DIFF_PARQUET)
        check_not_over(table, reads, text=False)
    if html_file is not None:
        check_not_over(check_output_file(html_file), reads)
        plotly_js()  # a missing plotly (exit 6) before diff.parquet is written, too
    diff = compare_runs(str(run_a), a, str(run_b), b)  # per step of each run's structure
    if not quiet:
        click.echo(render(diff), nl=False)
        click.echo("\n" + "\n".join(check_lines(check(a, b))))
    if out_dir is not None:
        try:
            with written_whole(out_dir / DIFF_PARQUET) as draft:
                diff.table().write_parquet(draft, statistics=True)
        except OSError as exc:
            raise write_failed(out_dir, exc) from None
        click.echo(f"nsysmap: wrote {out_dir / DIFF_PARQUET}", err=True)
    if html_file is not None:
        click.echo(f"nsysmap: wrote {write_page(diff_page(diff), html_file)}", err=True)
    if fail_above is not None:
        _gate(diff, fail_above, levels)


def _gate(diff: Diff, fail_above: float, levels: tuple[str, ...]) -> None:
    """Print the rows that grew more than `fail_above` percent; exit 13 when there are any."""
    rows = grown(diff, fail_above, levels)
    lines = grown_lines(rows, fail_above)
    if lines:
        click.echo("\n".join(lines))
        raise Regression(f"{rows.height} of the rows checked grew more than {fail_above:g} %")
