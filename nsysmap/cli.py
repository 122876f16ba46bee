"""Command-line interface (placeholder until the attribute command lands)."""

from __future__ import annotations

import click

from nsysmap._version import __version__


@click.group()
@click.version_option(__version__, prog_name="nsysmap")
def main() -> None:
    """Attribute GPU time in Nsight Systems reports to steps, phases and modules."""
