"""`nsysmap report DIR [--compare DIR2]`: answers with the numbers behind them, as Markdown."""

from __future__ import annotations

from pathlib import Path

import click

from nsysmap.flops.peaks import DTYPES
from nsysmap.report.answers import FLOP_SOURCES, ReportOptions, build_report
from nsysmap.report.io import read_run, write_report


@click.command("report")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--compare",
    "compare_dir",
    type=click.Path(path_type=Path),
    help="Output directory of a forward-only run to compare with.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Markdown file to write (default: DIR/report.md); the Parquet tables go to DIR.",
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
@click.option("--shapes", is_flag=True, help="Also list every module's operator shapes.")
@click.option("--quiet", is_flag=True, help="Write the files without printing the Markdown.")
def report_command(
    run_dir: Path,
    compare_dir: Path | None,
    output: Path | None,
    quiet: bool,
    **options: object,
) -> None:
    """Answer what GPU time goes to, per phase, module and kernel, with FLOPs and MFU."""
    main = read_run(run_dir)
    compare = read_run(compare_dir) if compare_dir is not None else None
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
