"""Which reports `nsysmap attribute` is given: files, directories and globs, in rank order.

Names sort naturally (`rank2` before `rank10`), so that the file order, which
numbers the ranks when the reports do not say theirs, follows the names.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Sequence
from pathlib import Path

from nsysmap.core.errors import InputNotFound
from nsysmap.sources.input_kinds import converted_name, named_kind, suffixes

# JSON files nsysmap itself writes next to its outputs: never reports.
OWN_FILES = ("manifest.json", "run.json", "flops.json")
_GLOB_CHARS = re.compile(r"[*?\[]")


def natural_key(path: Path) -> list[int | str]:
    """Sort key that orders the numbers in a name by value (`rank2` < `rank10`)."""
    parts = re.split(r"(\d+)", str(path))
    return [int(part) if part.isdigit() else part for part in parts]


def is_report(path: Path) -> bool:
    """Does the name say it is a report nsysmap reads (nsysmap.sources.input_kinds)?"""
    return named_kind(path) is not None and path.name.lower() not in OWN_FILES


def expand_inputs(arguments: Sequence[str | Path]) -> list[Path]:
    """The report files named by `arguments`, in order, each once.

    A directory stands for the reports directly inside it; a pattern with
    `*`, `?` or `[` that names no existing file is expanded as a glob (`**`
    recurses). A missing file, or a directory or pattern without reports,
    raises InputNotFound.
    """
    found: list[Path] = []
    for argument in arguments:
        found += _expand_one(Path(argument))
    seen: set[Path] = set()
    unique = []
    for path in found:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(path)
    return unique


def _expand_one(path: Path) -> list[Path]:
    if path.is_dir():
        reports = _reports([p for p in path.iterdir() if p.is_file()])
        if not reports:
            raise InputNotFound(f"{path}: no reports in this directory ({_suffixes()})")
        return reports
    if path.exists():
        return [path]
    if _GLOB_CHARS.search(str(path)):
        matches = [Path(m) for m in glob.glob(str(path), recursive=True)]
        reports = _reports([m for m in matches if m.is_file()])
        if not reports:
            raise InputNotFound(f"{path}: no reports match this pattern")
        return reports
    raise InputNotFound(f"{path}: no such file")


def _reports(files: list[Path]) -> list[Path]:
    """Reports among `files`, naturally sorted; one converted before it is read
    (`x.nsys-rep`) is skipped when its conversion (`x.sqlite`) is there."""
    names = {p.name for p in files}
    kept = [p for p in files if is_report(p) and converted_name(p) not in names]
    return sorted(kept, key=natural_key)


def _suffixes() -> str:
    return ", ".join(suffixes())
