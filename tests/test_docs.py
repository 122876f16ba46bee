"""The reference docs say everything the code declares.

Every command and every option of the click CLI is named in docs/cli.md, and
every column of every declared output table in docs/outputs.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import polars as pl
import pytest

from nsysmap.cli import cli
from nsysmap.core import schemas
from nsysmap.core.errors import ExitCode
from nsysmap.structure.table import STRUCTURE
from nsysmap.summaries.summarise import SUMMARY_TABLES

DOCS = Path(__file__).resolve().parents[1] / "docs"

# The declared schemas that are internal (the readers' contract with the
# attribution engine, docs/architecture.md), not output tables.
INTERNAL = {"PROFILE_OPS", "API_CALLS", "RANGES", "GRAPH_LINKS", "THREADS", "DEVICES", "META"}
INTERNAL |= {"COMPILED_KERNELS"}


def commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    """Every command under `group` by its full name ("report", "many run", ...)."""
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        found[prefix + name] = command
        if isinstance(command, click.Group):
            found.update(commands(command, f"{prefix}{name} "))
    return found


def option_names(command: click.Command) -> list[str]:
    """The spellings of every option of `command` (--help excluded)."""
    names = []
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            names += [*param.opts, *param.secondary_opts]
    return names


def output_schemas() -> dict[str, pl.Schema]:
    declared = {
        name: value
        for name, value in vars(schemas).items()
        if isinstance(value, pl.Schema) and name not in INTERNAL
    }
    return {**declared, "STRUCTURE": STRUCTURE}


def _mentioned(word: str, text: str) -> bool:
    """`word` as a whole word (an option's `--x` not inside `--x-y`)."""
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


def test_the_helpers_see_the_cli():
    found = commands(cli)
    assert {"attribute", "report", "run", "export", "diff", "flops"} <= set(found)
    assert "--compare" in option_names(found["report"])


@pytest.mark.parametrize("name", sorted(commands(cli)))
def test_every_command_and_option_is_in_cli_md(name):
    text = (DOCS / "cli.md").read_text()
    assert _mentioned(f"nsysmap {name}", text), f"`nsysmap {name}` is not in docs/cli.md"
    missing = [opt for opt in option_names(commands(cli)[name]) if not _mentioned(opt, text)]
    assert missing == [], f"options of `nsysmap {name}` missing from docs/cli.md"


def test_every_output_column_is_in_outputs_md():
    text = (DOCS / "outputs.md").read_text()
    missing = {
        name: [c for c in schema if not _mentioned(c, text)]
        for name, schema in output_schemas().items()
    }
    assert {name: cols for name, cols in missing.items() if cols} == {}


def test_the_column_check_fails_on_an_undocumented_column():
    text = (DOCS / "outputs.md").read_text()
    assert _mentioned("dur_ns", text)
    assert not _mentioned("surely_not_a_column_ns", text)
    assert not _mentioned("--step", "use --steps 2,3")


def test_every_summary_table_is_declared_in_schemas_and_documented():
    """The registry's tables are the ones whose columns the check above reads."""
    text = (DOCS / "outputs.md").read_text()
    declared = output_schemas().values()
    for table in SUMMARY_TABLES:
        assert any(table.schema is schema for schema in declared), table.name
        assert f"`{table.name}.parquet`" in text, f"{table.name}.parquet not in docs/outputs.md"


def test_the_exit_code_table_of_cli_md_is_the_codes_nsysmap_exits_with():
    text = (DOCS / "cli.md").read_text()
    table = text.split("## Errors and exit codes", 1)[1].split("\n## ", 1)[0]
    rows = {int(code) for code in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)}
    assert rows == {int(code) for code in ExitCode}
