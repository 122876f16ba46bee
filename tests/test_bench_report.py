"""What `make bench` prints: the stages the flow timed, the user-shaped row, and the
nsys-ai column or why it is missing."""

from __future__ import annotations

import json

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

    def fake_size(args, n, engines, others=(), *, user_scale=None):
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
