"""`nsysmap export DIR --perfetto FILE`: the attributed operations as a trace for Perfetto."""

from __future__ import annotations

from pathlib import Path

import click

from nsysmap.errors import ExitCode, NsysmapError
from nsysmap.export.perfetto import Selection, trace_text
from nsysmap.output.placement import check_output_file, write_file
from nsysmap.report.io import read_run


def _steps(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        return tuple(sorted({int(part) for part in value.split(",") if part.strip()}))
    except ValueError:
        raise click.BadParameter("give step numbers separated by commas, e.g. 2,3") from None


def _window(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> tuple[float, float] | None:
    if value is None:
        return None
    try:
        first, last = (float(x) for x in value.split(":"))
    except ValueError:
        raise click.BadParameter("give START_MS:END_MS, e.g. 0:250") from None
    if not 0 <= first < last:
        raise click.BadParameter("START_MS must be at least 0 and below END_MS")
    return first, last


@click.command("export")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--perfetto",
    "target",
    type=click.Path(path_type=Path),
    required=True,
    help="Chrome trace-event JSON file to write (opens in Perfetto and chrome://tracing).",
)
@click.option("--steps", callback=_steps, help="Only these steps, e.g. 2,3.")
@click.option(
    "--window",
    callback=_window,
    metavar="START_MS:END_MS",
    help="Only operations overlapping this window, in ms from the report's first operation.",
)
def export_command(
    run_dir: Path,
    target: Path,
    steps: tuple[int, ...] | None,
    window: tuple[float, float] | None,
) -> None:
    """Write the attributed GPU operations of DIR as a timeline for Perfetto."""
    run = read_run(run_dir)
    check_output_file(target)  # before anything is computed or written
    devices: dict[int, str | None] = {
        d["device_id"]: d.get("name")
        for d in run.manifest.get("devices") or []
        if isinstance(d, dict) and isinstance(d.get("device_id"), int)
    }
    text, count = trace_text(run.ops, devices, Selection(steps, window), str(run_dir))
    if not count:
        raise NsysmapError(
            f"{run_dir}: no operation in the steps or window asked for", exit_code=ExitCode.USAGE
        )
    write_file(target, text)
    click.echo(f"nsysmap: wrote {target} ({count:,} operations)", err=True)
