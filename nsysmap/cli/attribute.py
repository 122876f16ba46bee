"""`nsysmap attribute` (being written)."""

from __future__ import annotations

import click

from nsysmap.errors import NsysmapError


@click.command("attribute")
def attribute_command() -> None:
    """Not available yet."""
    raise NsysmapError("nsysmap attribute is not available in this build")
