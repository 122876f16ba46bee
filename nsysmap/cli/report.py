"""`nsysmap report` (being written)."""

from __future__ import annotations

import click

from nsysmap.errors import NsysmapError


@click.command("report")
def report_command() -> None:
    """Not available yet."""
    raise NsysmapError("nsysmap report is not available in this build")
