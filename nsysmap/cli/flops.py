"""`nsysmap flops` (being written)."""

from __future__ import annotations

import click

from nsysmap.errors import NsysmapError


@click.command("flops")
def flops_command() -> None:
    """Not available yet."""
    raise NsysmapError("nsysmap flops is not available in this build")
