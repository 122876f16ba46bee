"""Options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

# Paths are checked by nsysmap itself, not by click: click's readability check
# would answer an unreadable file with its usage text and exit 2 (docs/cli.md
# promises one line and exit 3), so every click.Path here says readable=False.


def output_option(default_help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`-o/--output DIR` (None when not given), with the command's default in its help."""
    return click.option(
        "-o",
        "--output",
        "out_dir",
        type=click.Path(path_type=Path, readable=False),
        default=None,
        help=f"Output directory (default: {default_help}).",
    )


def name_rule_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--step REGEX` and `--phase NAME=REGEX` (each repeatable): the user's name rules."""
    command = click.option(
        "--phase",
        "phase_rules",
        multiple=True,
        metavar="NAME=REGEX",
        help="Ranges whose name matches REGEX are phase NAME (data, zero_grad, forward, "
        "loss, backward, optimizer), or warm-up work (warmup); before the built-in "
        "names, which do not read a name a user rule matches. Repeatable.",
    )(command)
    return click.option(
        "--step",
        "step_rules",
        multiple=True,
        metavar="REGEX",
        help="Ranges whose name matches REGEX are steps; its first group (...) is the "
        "step number. Before the built-in names. Repeatable.",
    )(command)
