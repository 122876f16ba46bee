"""`nsysmap report DIR [--compare DIR2]`: answers with the numbers behind them, as Markdown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from nsysmap.core.errors import ExitCode, NsysmapError
from nsysmap.flops.peaks import DTYPES
from nsysmap.many.ranks_section import is_multi_rank, rank_report
from nsysmap.output.guard import check_not_over
from nsysmap.output.placement import (
    check_output_dir,
    check_output_file,
    write_failed,
    write_file,
)
from nsysmap.report.answers import FLOP_SOURCES, ReportOptions
from nsysmap.report.build import build_report
from nsysmap.report.html.page import REPORT_HTML, plotly_js, report_page, write_page
from nsysmap.report.rank_files import read_rank_run
from nsysmap.report.report_files import REPORT_MD, read_run, write_report


@click.command("report")
@click.argument("run_dir", type=click.Path(path_type=Path, readable=False))
@click.option(
    "--compare",
    "compare_dir",
    type=click.Path(path_type=Path, readable=False),
    help="Output directory of another run to compare with, typically forward-only "
    "(the report says what it is).",
)
@click.option(
    "--markdown",
    "markdown_file",
    type=click.Path(path_type=Path, readable=False),
    metavar="FILE",
    help="Markdown file to write (default: DIR/report.md); the Parquet tables go to DIR.",
)
@click.option(
    "-o",
    "--output",
    "old_output",
    type=click.Path(path_type=Path, readable=False),
    hidden=True,  # -o names a directory in every other command: kept one release
)
@click.option("--dtype", type=click.Choice(DTYPES), help="Compute dtype for the peak (MFU).")
@click.option("--peak-tflops", type=click.FloatRange(min=0, min_open=True), help="Dense peak.")
@click.option("--device-name", help="GPU name, when the report does not give it.")
@click.option(
    "--flops",
    type=click.Choice(FLOP_SOURCES),
    default="auto",
    show_default=True,
    help="Where FLOPs come from: recorded shapes, the model's FLOP document, or none.",
)
@click.option(
    "--html",
    "html_file",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[FILE]",
    help="Also write the report as one self-contained HTML page (default: DIR/report.html).",
)
@click.option("--shapes", is_flag=True, help="Also list every module's operator shapes.")
@click.option(
    "--rank",
    type=click.IntRange(min=0),
    help="Of a multi-rank output: the whole report of this rank alone, written to "
    "DIR/rank<R>/ (default: the cross-rank report).",
)
@click.option("--quiet", is_flag=True, help="Write the files without printing the Markdown.")
def report_command(
    run_dir: Path,
    compare_dir: Path | None,
    markdown_file: Path | None,
    old_output: Path | None,
    html_file: str | None,
    quiet: bool,
    rank: int | None,
    **options: Any,  # click has checked each against its option type
) -> None:
    """Answer what GPU time goes to, per phase, module and kernel, with FLOPs and MFU."""
    output = _markdown_target(markdown_file, old_output)
    multi = is_multi_rank(run_dir)
    if multi and rank is None:  # several reports: the cross-rank section (docs/many.md)
        _rank_report(run_dir, output, html_file is not None, quiet)
        return
    if rank is not None and not multi:
        raise NsysmapError(
            f"{run_dir}: --rank reads an output of several ranks (nsysmap run on distributed "
            "training, nsysmap attribute of several reports); this one holds one run",
            exit_code=ExitCode.USAGE,
        )
    main = read_run(run_dir) if rank is None else read_rank_run(run_dir, rank)
    compare = read_run(compare_dir) if compare_dir is not None else None
    reads = [run_dir] if compare_dir is None else [run_dir, compare_dir]
    if rank is not None:  # the rank's report tables go to a folder of their own
        run_dir = run_dir / f"rank{rank}"
    html = _html_target(html_file, run_dir)
    _check_outputs(run_dir, output, html, reads)  # every output, before anything is written
    if rank is not None:
        _made(run_dir)
    chosen = ReportOptions(
        dtype=options["dtype"],
        peak_tflops=options["peak_tflops"],
        device_name=options["device_name"],
        flops=str(options["flops"]),
        show_shapes=bool(options["shapes"]),
    )
    result = build_report(main, compare, chosen)
    target = write_report(result, run_dir, output)
    if not quiet:
        click.echo(result.markdown)
    click.echo(f"nsysmap: wrote {target} and {len(result.tables)} tables in {run_dir}", err=True)
    if html is not None:
        page = report_page(result.findings, result.compare)
        click.echo(f"nsysmap: wrote {write_page(page, html)}", err=True)


def _made(folder: Path) -> None:
    """`folder` made where it is missing (a rank's report folder inside the output)."""
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        raise write_failed(folder, exc) from None


def _html_target(html_file: str | None, run_dir: Path) -> Path | None:
    """The HTML page asked for: `--html FILE`, `--html` alone (DIR/report.html), or none."""
    if html_file is None:
        return None
    return Path(html_file) if html_file else run_dir / REPORT_HTML


def _check_outputs(
    run_dir: Path, markdown: Path | None, html: Path | None, reads: list[Path]
) -> None:
    """Refuse (OutputFailed, exit 10) any output that cannot be written, or would be
    written over what the report reads (nsysmap.output.guard), none written yet."""
    check_output_dir(run_dir)
    check_not_over(check_output_file(markdown or run_dir / REPORT_MD), reads)
    if html is not None:
        check_not_over(check_output_file(html), reads)
        plotly_js()  # a missing plotly (exit 6) before the Markdown is written, too


def _markdown_target(markdown_file: Path | None, old_output: Path | None) -> Path | None:
    """The Markdown file asked for: `--markdown FILE`, or the old `-o FILE` with a notice."""
    if old_output is None:
        return markdown_file
    if markdown_file is not None:
        message = "give the Markdown file once: --markdown FILE (-o is its old name)"
        raise NsysmapError(message, exit_code=ExitCode.USAGE)
    click.echo(
        "nsysmap: report -o FILE is now --markdown FILE (-o goes in the next release)", err=True
    )
    return old_output


def _rank_report(run_dir: Path, output: Path | None, html: bool, quiet: bool) -> None:
    target = check_output_file(output or run_dir / REPORT_MD)
    check_not_over(target, [run_dir])
    if html:
        click.echo("nsysmap: a multi-rank output has no HTML page; --html ignored", err=True)
    markdown = rank_report(run_dir)
    write_file(target, markdown)
    if not quiet:
        click.echo(markdown)
    click.echo(f"nsysmap: wrote {target}", err=True)
