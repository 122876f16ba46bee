"""`nsysmap export DIR --perfetto FILE`: the attributed operations as a trace for Perfetto."""

from __future__ import annotations

from pathlib import Path

import click

from nsysmap.core.errors import ExitCode, NsysmapError
from nsysmap.export.perfetto import Selection, Trace, build_trace
from nsysmap.export.window import DEFAULT_STEPS, OPERATION_LIMIT, default_selection
from nsysmap.output.guard import check_not_over
from nsysmap.output.placement import check_output_file, write_failed
from nsysmap.output.whole_file import written_whole
from nsysmap.report.report_files import read_run


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
@click.option(
    "--first-steps",
    type=click.IntRange(min=1),
    metavar="N",
    help="The time of the first N steady steps, whatever the report's size (unless told, a "
    f"report of over {OPERATION_LIMIT:,} operations gets its first {DEFAULT_STEPS}).",
)
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Every operation, however many (a large report gives a file Perfetto may not open).",
)
def export_command(
    run_dir: Path,
    target: Path,
    steps: tuple[int, ...] | None,
    window: tuple[float, float] | None,
    first_steps: int | None,
    everything: bool,
) -> None:
    """Write the attributed GPU operations of DIR as a timeline for Perfetto."""
    chosen = [name for name, given in _given(steps, window, first_steps, everything) if given]
    if len(chosen) > 1 and not set(chosen) <= {"--steps", "--window"}:
        raise click.UsageError(f"{' and '.join(chosen)} exclude each other; give one")
    run = read_run(run_dir)
    check_output_file(target)  # before anything is computed or written
    check_not_over(target, [run_dir])
    devices: dict[int, str | None] = {
        d["device_id"]: d.get("name")
        for d in run.manifest.get("devices") or []
        if isinstance(d, dict) and isinstance(d.get("device_id"), int)
    }
    if steps is not None or window is not None or everything:
        selection = Selection(steps, window)
    else:
        selection = default_selection(
            run.ops, first_steps or DEFAULT_STEPS, always=first_steps is not None
        )
    trace = build_trace(run.ops, devices, selection, str(run_dir))
    if not trace.operations:
        raise NsysmapError(
            f"{run_dir}: no operation in the steps or window asked for", exit_code=ExitCode.USAGE
        )
    _write(trace, target)
    click.echo(f"nsysmap: wrote {target} ({trace.operations:,} operations)", err=True)
    if trace.note:
        click.echo(f"nsysmap: {trace.note}", err=True)


def _given(
    steps: object, window: object, first_steps: object, everything: bool
) -> list[tuple[str, bool]]:
    return [
        ("--steps", steps is not None),
        ("--window", window is not None),
        ("--first-steps", first_steps is not None),
        ("--all", everything),
    ]


def _write(trace: Trace, target: Path) -> None:
    """Write the trace as it is encoded, replacing `target` whole: a failure leaves
    the file that was there and removes the part written (OutputFailed)."""
    try:
        with written_whole(target) as draft, draft.open("w", encoding="utf-8") as out:
            trace.write(out)
    except OSError as exc:
        raise write_failed(target, exc) from None
