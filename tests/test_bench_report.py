"""What `make bench` prints: the stages the flow timed, the user-shaped row, and the
nsys-ai column or why it is missing."""

from __future__ import annotations

import json

import pytest

from bench import peers, run
from bench.report import markdown

MACHINE_KEYS = ("cpu", "cores", "memory_gb", "python", "polars", "pyarrow")
MACHINE_KEYS += ("adbc-driver-sqlite", "connectorx", "sqlite (stdlib)")
MACHINE = dict.fromkeys(MACHINE_KEYS, "x")


def _stat(value: float) -> dict:
    return {"median": value, "min": value, "max": value, "n": 1}


def _size(kernels: int, stages: dict[str, float], label: str | None = None) -> dict:
    run_ = {"wall_s": _stat(2.0), "peak_rss_gb": _stat(1.0)}
    size = {"kernels": kernels, "ranges": 3 * kernels, "runs": {"nsysmap": run_}}
    size["stages"] = {name: _stat(s) for name, s in stages.items()}
    return size | ({"label": label} if label else {})


def _results(*sizes: dict, skipped: tuple[str, ...] = ()) -> dict:
    return {"machine": MACHINE, "started": "now", "sizes": list(sizes), "skipped": list(skipped)}


def test_every_stage_the_flow_timed_is_a_column_in_flow_order():
    stages = {"read": 1.0, "hash": 0.1, "infer": 0.5, "attribute": 2.0, "new_stage": 0.25}
    table = markdown(_results(_size(1000, stages)))
    assert "| kernels | read | attribute | infer | hash | new_stage |" in table
    assert "| 1,000 | 1.00 | 2.00 | 0.50 | 0.10 | 0.25 |" in table


def test_the_user_shaped_export_has_its_own_rows():
    user = _size(2_200_000, {"read": 9.0}, label="user-shaped ×1")
    table = markdown(_results(_size(1000, {"read": 1.0}), user))
    assert "| 2,200,000 (user-shaped ×1) | 6,600,000 | nsysmap | 1 | 2.00 |" in table
    assert "| 2,200,000 (user-shaped ×1) | 9.00 |" in table


def test_without_nsys_ai_the_side_by_side_table_says_why():
    line = "skipping nsys-ai: the peer environment /x/.venv-peers is absent (make peers)"
    text = peers.side_by_side(_results(_size(1000, {}), skipped=("skipping floor (x): y", line)))
    assert text.strip() == f"Side by side: not run ({line})"


def test_user_shaped_scales_are_run_after_the_sizes(monkeypatch, tmp_path, capsys):
    seen = []

    def fake_size(args, n, engines, others=(), *, processes=None, user_scale=None):
        seen.append((n, user_scale))
        label = {"label": f"user-shaped ×{user_scale:g}"} if user_scale else {}
        return _size(n or 2200, {"read": 1.0}) | label

    monkeypatch.setattr(run, "bench_size", fake_size)
    out = tmp_path / "r.json"
    argv = ["--sizes", "1e3", "--user-shaped", "0.001,0.1", "--engines", "nsysmap"]
    run.main([*argv, "--out", str(out)])
    assert seen == [(1000, None), (0, 0.001), (0, 0.1)]
    assert [s.get("label") for s in json.loads(out.read_text())["sizes"]] == [
        None,
        "user-shaped ×0.001",
        "user-shaped ×0.1",
    ]
    assert "| 2,200 (user-shaped ×0.1) |" in capsys.readouterr().out


def test_one_process_sizes_come_after_the_sizes_with_their_own_label(monkeypatch, tmp_path):
    seen = []

    def fake_size(args, n, engines, others=(), *, processes=None, user_scale=None):
        seen.append((n, processes, [e.name for e in engines]))
        return _size(n, {"read": 1.0})

    monkeypatch.setattr(run, "bench_size", fake_size)
    argv = ["--sizes", "1e3", "--one-process", "3e3", "--engines", "nsysmap"]
    run.main([*argv, "--out", str(tmp_path / "r.json")])
    assert [(n, p) for n, p, _ in seen] == [(1000, None), (3000, 1)]
    # Every nsysmap engine is handed on; bench_size keeps those that run on the export.
    assert "nsysmap (by window)" in seen[1][2] and "nsysmap (by process)" in seen[1][2]


def test_engines_that_cannot_read_an_export_are_left_out_of_its_runs(monkeypatch, tmp_path):
    ran = []
    export = lambda n, seed, processes: tmp_path / f"p{processes}"  # noqa: E731
    monkeypatch.setattr(run.generate, "export", export)
    monkeypatch.setattr(run.generate, "CACHE", tmp_path)
    monkeypatch.setattr(run, "_counts", lambda path: {"kernels": 10, "ranges": 30})
    monkeypatch.setattr(run, "warm", lambda path: None)
    monkeypatch.setattr(run, "run_child", lambda module, *a: ran.append(a) or _fake_run())
    args = run.argparse.Namespace(
        seed=0,
        processes=2,
        runs=1,
        large_runs=1,
        sql_runs=0,
        sql_large_runs=0,
        peer_runs=0,
        peer_large_runs=0,
        engines={"nsysmap"},
        keep_outputs=True,
    )
    nsysmap_engines = [e for e in run.ALL_ENGINES if e.family == "nsysmap"]
    one = run.bench_size(args, 10, nsysmap_engines, processes=1)
    assert set(one["runs"]) == {"nsysmap", "nsysmap (by window)"}
    assert one["label"] == "one process"
    two = run.bench_size(args, 10, nsysmap_engines)
    assert set(two["runs"]) == {"nsysmap", "nsysmap (by process)"}
    assert one["runs"]["nsysmap"]["read_as"] == {"windows": "8"}
    large = run.bench_size(args, run.LARGE, nsysmap_engines, processes=1)
    assert set(large["runs"]) == {"nsysmap"}  # split by the budget already


def _fake_run():
    output = {"seconds": 1.0, "stages": {"read": 1.0}, "read_as": {"windows": "8"}}
    return run.Run(wall_s=1.0, peak_rss_bytes=10**9, output=output)


def test_the_table_says_how_each_export_was_read():
    size = _size(1000, {"read": 1.0}, label="one process")
    runs = size["runs"]
    runs["nsysmap"]["read_as"] = {"refused": "no quiet gap"}
    runs["nsysmap (by window)"] = runs["nsysmap"] | {"read_as": {"windows": "8"}}
    runs["nsysmap (by process)"] = runs["nsysmap"] | {"read_as": {"processes": "2"}}
    runs["floor (adbc)"] = runs["nsysmap"] | {"read_as": None}
    table = markdown(_results(size))
    assert "floor (adbc): " not in table  # the floor reads no report
    assert "- 1,000 (one process), nsysmap: whole (time windows refused: no quiet gap)" in table
    assert "- 1,000 (one process), nsysmap (by window): 8 time windows one at a time" in table
    assert "- 1,000 (one process), nsysmap (by process): 2 processes one at a time" in table


@pytest.mark.slow
def test_nsysmap_run_says_it_read_a_one_process_export_in_windows(tmp_path, monkeypatch):
    from bench import nsysmap_run
    from devtools.synth.bulk import write_export
    from devtools.synth.tile import gpt_tables
    from nsysmap.sources.choose import WINDOWS_ENV

    export = tmp_path / "one.sqlite"
    write_export(export, gpt_tables(5_000, seed=0, processes=1))
    whole, _ = nsysmap_run.attributed(export, tmp_path / "whole")
    assert nsysmap_run.read_as(whole) == {}
    monkeypatch.setenv(WINDOWS_ENV, "3")
    split, _ = nsysmap_run.attributed(export, tmp_path / "split")
    assert nsysmap_run.read_as(split) == {"windows": "3"}


def test_each_nsysmap_engine_writes_its_own_outputs(tmp_path):
    """The SQL agreement reads the whole read's ops.parquet, which no split run overwrites."""
    nsysmap_engines = [e for e in run.ALL_ENGINES if e.family == "nsysmap"]
    folders = {run._child_args(e, tmp_path / "x.sqlite", tmp_path)[1] for e in nsysmap_engines}
    assert len(folders) == len(nsysmap_engines)
    assert str(run.output_dir(tmp_path, "nsysmap")) in folders


@pytest.mark.parametrize(
    ("compiled", "said"),
    [(True, "nsysmap compiled to bytecode"), (False, "nsysmap not all compiled to bytecode")],
)
def test_the_machine_line_says_whether_nsysmap_ran_from_bytecode(compiled, said):
    results = _results(_size(1000, {})) | {"machine": MACHINE | {"bytecode_compiled": compiled}}
    assert said in markdown(results).splitlines()[0]


def test_results_from_before_the_bytecode_step_say_it_was_not_recorded():
    assert "nsysmap bytecode not recorded" in markdown(_results(_size(1000, {})))


def test_the_benchmark_leaves_bytecode_for_every_module_the_engines_import(tmp_path):
    import importlib.util
    import shutil
    from pathlib import Path

    from bench.measure import PACKAGES, ROOT, compile_packages

    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    sources = [p for name in PACKAGES for p in (tmp_path / name).rglob("*.py")]
    assert len(sources) > 150
    assert compile_packages(tmp_path)
    compiled = [Path(importlib.util.cache_from_source(str(p))) for p in sources]
    assert all(
        c.is_file() and c.stat().st_mtime >= p.stat().st_mtime
        for c, p in zip(compiled, sources, strict=True)
    )
