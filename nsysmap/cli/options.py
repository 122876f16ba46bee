"""Options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click


def output_option(default_help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`-o/--output DIR` (None when not given), with the command's default in its help."""
    return click.option(
        "-o",
        "--output",
        "out_dir",
        type=click.Path(path_type=Path),
        default=None,
        help=f"Output directory (default: {default_help}).",
    )
