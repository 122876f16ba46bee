"""The fast tier: `pytest --fast`, what `make check` runs (under 30 s with lint).

`--fast` collects only the modules below (the pure middle's unit tests, the
readers, the docs and import checks: quick to import, no torch) and leaves out
their tests marked slow, corpus, browser, dask or fresh (markers in setup.cfg).
`make test` runs everything, these included.
"""

from __future__ import annotations

from pathlib import Path

import pytest

FAST_EXCLUDES = ("slow", "corpus", "browser", "dask", "fresh")

FAST_MODULES = frozenset(
    {
        "test_api.py",
        "test_attribute.py",
        "test_attribute_sqlite.py",
        "test_by_range.py",
        "test_deep_ranges.py",
        "test_diff.py",
        "test_docs.py",
        "test_imports.py",
        "test_labels_categories.py",
        "test_many_units.py",
        "test_module_names.py",
        "test_nesting.py",
        "test_nested_profile.py",
        "test_nsys_tool.py",
        "test_operator_ranges.py",
        "test_overlap.py",
        "test_reader.py",
        "test_render_ranges.py",
        "test_report_blocks.py",
        "test_report_peaks.py",
        "test_report_shapes.py",
        "test_samples.py",
        "test_stages.py",
        "test_synth.py",
        "test_tiers.py",
        "test_torch_trace_launches.py",
    }
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="the fast tier (make check): a chosen set of modules, without the tests "
        f"marked {', '.join(FAST_EXCLUDES)}",
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if config.getoption("--fast") and collection_path.suffix == ".py":
        return collection_path.name.startswith("test_") and collection_path.name not in FAST_MODULES
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--fast"):
        return
    kept, dropped = [], []
    for item in items:
        marked = any(item.get_closest_marker(name) for name in FAST_EXCLUDES)
        (dropped if marked else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
