"""The `nsysmap` command: a thin click shell over the library.

Each command lives in its own module and makes one library call, then renders.
`main` turns every NsysmapError into one line on stderr and its documented exit
code (docs/cli.md); anything else is reported as an internal error, on one
line too, with the traceback only when NSYSMAP_DEBUG=1.
"""

from __future__ import annotations

import os
import sys

import click

from nsysmap._version import __version__
from nsysmap.cli.attribute import attribute_command
from nsysmap.cli.diff import diff_command
from nsysmap.cli.export import export_command
from nsysmap.cli.flops import flops_command
from nsysmap.cli.report import report_command
from nsysmap.cli.run import run_command
from nsysmap.errors import ExitCode, NsysmapError, one_line


@click.group()
@click.version_option(__version__, prog_name="nsysmap")
def cli() -> None:
    """Attribute GPU time in Nsight Systems reports to steps, phases and modules."""


cli.add_command(attribute_command)
cli.add_command(run_command)
cli.add_command(flops_command)
cli.add_command(report_command)
cli.add_command(export_command)
cli.add_command(diff_command)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns (and exits with) the exit code."""
    code = _invoke(argv)
    sys.exit(code)


def _invoke(argv: list[str] | None) -> int:
    try:
        result = cli.main(args=argv, prog_name="nsysmap", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("nsysmap: interrupted", err=True)
        return ExitCode.INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except NsysmapError as exc:
        click.echo(f"nsysmap: error: {exc}", err=True)
        return getattr(exc, "process_exit", int(exc.exit_code))
    except KeyboardInterrupt:
        click.echo("nsysmap: interrupted", err=True)
        return ExitCode.INTERRUPTED
    except Exception as exc:  # the one place that reports bugs
        if os.environ.get("NSYSMAP_DEBUG") == "1":
            raise
        click.echo(
            f"nsysmap: internal error: {type(exc).__name__}: {one_line(str(exc), 300)} "
            "(set NSYSMAP_DEBUG=1 for the traceback)",
            err=True,
        )
        return ExitCode.INTERNAL
    return int(result or 0)
