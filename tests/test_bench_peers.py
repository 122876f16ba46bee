"""The peer engines (nsys-ai, HTA) are wired right without the peers installed:
skipped with one line when their environment is absent, the right command
lines, a time-out recorded as a result, a run without output a failure."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from bench import peers, run


def _fake_venv(root: Path, nsys_ai_script: str | None = None, hta: bool = False) -> Path:
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    if nsys_ai_script is not None:
        script = venv / "bin" / "nsys-ai"
        script.write_text(f"#!/bin/sh\n{nsys_ai_script}\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    if hta:
        folder = venv / "lib" / "python3.11" / "site-packages" / "hta"
        folder.mkdir(parents=True)
        (folder / "trace_analysis.py").write_text("")
    return venv


def test_an_absent_peer_environment_skips_every_peer_with_one_line(tmp_path):
    ready, skipped = peers.available(peers.PEERS, tmp_path / "missing")
    assert ready == []
    assert [line.split(":")[0] for line in skipped] == ["skipping nsys-ai", "skipping HTA"]
    for line in skipped:
        assert "peer environment" in line and "make peers" in line and "\n" not in line


def test_a_peer_missing_from_the_environment_is_skipped_and_the_other_kept(tmp_path):
    venv = _fake_venv(tmp_path, hta=True)
    ready, skipped = peers.available(peers.PEERS, venv)
    assert ready == [peers.HTA]
    assert skipped == [f"skipping nsys-ai: it is not installed in {venv} (make peers)"]
    assert peers.available(peers.PEERS, venv, kind="torch") == ([peers.HTA], [])


def test_the_command_lines_use_the_peer_environment(tmp_path):
    venv = tmp_path / "v"
    export = tmp_path / "gpt.sqlite"
    assert peers.command(peers.NSYS_AI, export, venv) == [
        str(venv / "bin" / "nsys-ai"),
        *("skill", "run", "nvtx_layer_breakdown", str(export), "--format", "json"),
    ]
    folder = tmp_path / "traces"
    assert peers.command(peers.HTA, folder, venv) == [
        str(venv / "bin" / "python"),
        str(peers.CHILD),
        "hta",
        str(folder),
    ]


@pytest.mark.slow
def test_a_time_out_is_a_result_not_a_failure():
    done = peers.run_timed([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.3)
    assert done.timed_out and done.wall_s == 0.3
    summary = peers.summarise([done], 0.3)
    assert peers.wall_text(summary) == ("> 0", "1 of 1 timed out")
    assert peers.ratio_text(summary, 0.1) == "> 3.0"


def test_a_run_that_prints_nothing_or_fails_raises():
    with pytest.raises(RuntimeError, match="no output"):
        peers.run_timed([sys.executable, "-c", "pass"])
    with pytest.raises(RuntimeError, match="exit status 3"):
        peers.run_timed([sys.executable, "-c", "print(1); raise SystemExit(3)"])
    done = peers.run_timed([sys.executable, "-c", "print('[1]')"])
    assert not done.timed_out and done.output_bytes == 4 and done.peak_rss_bytes > 0


def test_nsys_ai_reads_the_export_without_its_cache_and_leaves_none(tmp_path):
    export = tmp_path / "gpt.sqlite"
    export.write_bytes(b"")
    cache, lock = peers.nsys_ai_cache(export)
    assert (cache.name, lock.name) == ("gpt.nsys-cache", "gpt.nsys-cache.build.lock")
    cache.mkdir()
    lock.write_text("")
    # The fake nsys-ai fails when it finds a cache, and writes one as the real one does.
    venv = _fake_venv(
        tmp_path, f'test -e "{cache}" && exit 9; mkdir "{cache}"; touch "{lock}"; echo "[]"'
    )
    done = peers.run_peer(peers.NSYS_AI, export, venv)
    assert not done.timed_out and done.output_bytes == 3
    assert not cache.exists() and not lock.exists()


def test_the_benchmark_lists_the_skipped_peers(monkeypatch, tmp_path, capsys):
    seen = []

    def fake_size(args, n, engines, others=()):
        seen.append(list(others))
        return {"size": n, "kernels": n, "ranges": 3 * n, "runs": {}, "stages": {}}

    monkeypatch.setattr(run, "bench_size", fake_size)
    out = tmp_path / "r.json"
    run.main(["--sizes", "1e3", "--out", str(out), "--peers-venv", str(tmp_path / "none")])
    assert seen == [[]]
    results = json.loads(out.read_text())
    assert "skipping nsys-ai: the peer environment" in capsys.readouterr().out
    assert [s.split(":")[0] for s in results["skipped"] if "nsys-ai" in s] == ["skipping nsys-ai"]
    assert not any("HTA" in s for s in results["skipped"])  # a torch.profiler peer


def test_the_side_by_side_table_gives_the_ratio_to_nsysmap():
    nsysmap = {"wall_s": {"median": 2.0, "min": 1.5, "max": 2.5, "n": 3}, "peak_rss_gb": {}}
    nsysmap["peak_rss_gb"] = {"median": 0.5}
    slow = peers.summarise([peers.PeerRun(s, 10**9, False, 5) for s in (30.0, 20.0, 40.0)], 600)
    table = peers.side_by_side(
        {
            "peer_versions": {"nsys-ai": "0.3.0"},
            "sizes": [{"kernels": 1000, "runs": {"nsysmap": nsysmap}, "peers": {"nsys-ai": slow}}],
        }
    )
    assert "| 1,000 | nsysmap | 3 | 2.00 | 1.50..2.50 | 0.50 | 1.0 | - |" in table
    assert "| 1,000 | nsys-ai | 3 | 30.00 | 20.00..40.00 | 1.00 | 15.0 | - |" in table
