"""`python -m bench` works on a fresh clone: an engine whose package is missing is skipped."""

from __future__ import annotations

import json
import sys

from bench import run
from bench.engines import ENGINES, available, installed


def _names(engines):
    return [e.name for e in engines]


def test_an_engine_whose_package_fails_to_import_is_skipped(monkeypatch):
    monkeypatch.setitem(sys.modules, "connectorx", None)  # `import connectorx` fails
    ready, skipped = available(ENGINES)
    assert "floor (connectorx)" not in _names(ready)
    assert {"nsysmap", "sql"} <= set(_names(ready))
    assert len(skipped) == 1
    assert skipped[0].startswith("skipping floor (connectorx): connectorx is not installed")
    assert "\n" not in skipped[0]


def test_every_optional_engine_missing_leaves_the_core_engines(monkeypatch):
    for module in ("connectorx", "adbc_driver_sqlite"):
        monkeypatch.setitem(sys.modules, module, None)
    ready, skipped = available(ENGINES)
    assert _names(ready) == ["nsysmap", "nsysmap (by process)", "nsysmap (by window)", "sql"]
    assert [line.split(":")[0] for line in skipped] == [
        "skipping floor (adbc)",
        "skipping floor (connectorx)",
    ]


def test_an_installed_package_keeps_its_engine():
    ready, skipped = available(ENGINES, find=lambda module: object())
    assert _names(ready) == _names(ENGINES)
    assert skipped == []
    assert not installed("no_such_module_for_nsysmap_bench")


_NOT_HERE = ("floor (connectorx)",)


def test_the_benchmark_runs_without_the_missing_engine(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "connectorx", None)
    seen = []

    def fake_size(args, n, engines, others=(), *, processes=None, user_scale=None):
        seen.append(_names(engines))
        return {"size": n, "kernels": n, "ranges": 3 * n, "runs": {}, "stages": {}}

    monkeypatch.setattr(run, "bench_size", fake_size)
    run.main(["--sizes", "1e3", "--out", str(tmp_path / "r.json")])
    # every installed engine; bench_size keeps those that read the export
    # (tests/test_bench_report.py)
    assert seen == [[n for n in _names(ENGINES) if n not in _NOT_HERE]]
    out = capsys.readouterr().out
    assert "skipping floor (connectorx): connectorx is not installed" in out
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["skipped"] == [line for line in out.splitlines() if line.startswith("skip")]


def test_the_split_engines_run_on_the_exports_they_can_split():
    """By process on exports of several processes, by window on one-process exports."""
    several = [e.name for e in ENGINES if e.runs_on(2)]
    one = [e.name for e in ENGINES if e.runs_on(1)]
    assert "nsysmap (by process)" in several and "nsysmap (by process)" not in one
    assert "nsysmap (by window)" in one and "nsysmap (by window)" not in several
    assert "nsysmap" in several and "nsysmap" in one
