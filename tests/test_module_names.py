"""Every module of nsysmap/, instrument/ and devtools/ has a name no other module has.

A name says what a module holds wherever it is read: in a traceback, an
import line or a search. The exceptions are the package files (`__init__`,
`__main__`) and nsysmap/cli/, whose modules are named after the command each
defines (`cli/run.py` is `nsysmap run`).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("nsysmap", "instrument", "devtools")
SHARED = {"__init__", "__main__"}
NAMED_AFTER_COMMANDS = ROOT / "nsysmap" / "cli"


def _modules_by_name() -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.stem in SHARED or path.parent == NAMED_AFTER_COMMANDS:
                continue
            found[path.stem].append(str(path.relative_to(ROOT)))
    return found


def test_module_names_are_unique_outside_the_command_modules():
    repeated = {name: paths for name, paths in _modules_by_name().items() if len(paths) > 1}
    assert repeated == {}


def test_the_rule_sees_every_package():
    names = _modules_by_name()
    # a module of each package is found, so an empty walk cannot pass
    assert "verbs" in names and "contract" in names and "nsys_sqlite" in names and "bulk" in names
    assert "attribute" in names  # attribution/attribute.py, though cli/attribute.py exists
