"""The `nsysmap` command: a thin click shell over the library.

Each command lives in its own module and makes one library call, then renders.
The group itself (`NsysmapGroup.main`) turns every NsysmapError into one line
on stderr and its documented exit code (docs/cli.md); anything else is
reported as an internal error, on one line too, with the traceback only when
NSYSMAP_DEBUG=1. So the console script and click's test runner
(`CliRunner().invoke(cli, ...)`) behave the same; the console script
(nsysmap.console) adds only the Ctrl-C taken before these imports and
after the command.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click

from nsysmap._version import __version__
from nsysmap.cli.attribute import attribute_command
from nsysmap.cli.diff import diff_command
from nsysmap.cli.export import export_command
from nsysmap.cli.flops import flops_command
from nsysmap.cli.report import report_command
from nsysmap.cli.run import run_command
from nsysmap.core import interrupts
from nsysmap.core.errors import ExitCode, NsysmapError, one_line
from nsysmap.core.inert import terminal_text


class NsysmapGroup(click.Group):
    """The command group, with nsysmap's error handling and exit codes around every run."""

    def main(  # type: ignore[override]  # always exits, with nsysmap's exit code
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> None:
        def run() -> Any:
            return super(NsysmapGroup, self).main(
                args, prog_name, complete_var, standalone_mode=False, **extra
            )

        sys.exit(_exit_code(run))


@click.group(cls=NsysmapGroup)
@click.version_option(__version__, prog_name="nsysmap")
def cli() -> None:
    """Attribute GPU time in Nsight Systems reports to steps, phases and modules."""


cli.add_command(attribute_command)
cli.add_command(run_command)
cli.add_command(flops_command)
cli.add_command(report_command)
cli.add_command(export_command)
cli.add_command(diff_command)


def main(argv: list[str] | None = None) -> None:
    """Run the command and exit with its code, Ctrl-C left to Python (`python -m
    nsysmap.cli` and the console script, nsysmap.console, answer it:
    nsysmap.core.interrupts.answered)."""
    cli.main(args=argv, prog_name="nsysmap")


def exit_code_of(argv: list[str] | None = None) -> int:
    """Run `nsysmap ARGV` (sys.argv when None); its exit code (nothing exits)."""
    try:
        cli.main(args=argv, prog_name="nsysmap")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return 0


def _exit_code(run: Callable[[], Any]) -> int:
    """Run a command; its exit code, every failure reported in one line on stderr."""
    interrupts.forget_completed()
    try:
        result = run()
    except click.exceptions.Abort:
        click.echo(interrupts.interrupted_line(), err=True)
        return ExitCode.INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except NsysmapError as exc:
        click.echo(f"nsysmap: error: {terminal_text(exc)}", err=True)
        return getattr(exc, "process_exit", int(exc.exit_code))
    except KeyboardInterrupt:
        click.echo(interrupts.interrupted_line(), err=True)
        return ExitCode.INTERRUPTED
    except Exception as exc:  # the one place that reports bugs
        if os.environ.get("NSYSMAP_DEBUG") == "1":
            raise
        click.echo(
            f"nsysmap: internal error: {type(exc).__name__}: "
            f"{terminal_text(one_line(str(exc), 300))} "
            "(set NSYSMAP_DEBUG=1 for the traceback)",
            err=True,
        )
        return ExitCode.INTERNAL
    return int(result or 0)
