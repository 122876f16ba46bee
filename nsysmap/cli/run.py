"""`nsysmap run` (being written)."""

from __future__ import annotations

import click

from nsysmap.errors import NsysmapError


@click.command("run")
def run_command() -> None:
    """Not available yet."""
    raise NsysmapError("nsysmap run is not available in this build")
