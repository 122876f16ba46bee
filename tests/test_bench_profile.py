"""`python -m bench.profile`: the flow's own stages with their memory, and its functions."""

from __future__ import annotations

import pytest

from bench import profile
from devtools.synth import bulk_tables, write_export

pytestmark = pytest.mark.slow  # runs the whole flow


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    root = tmp_path_factory.mktemp("profile")
    export = write_export(root / "small.sqlite", bulk_tables(600))
    return profile.profiled(export, root / "out", infer=True, memory_gb=None, top=40, asks=15)


def test_every_stage_the_flow_times_is_a_row(result, capsys):
    assert {"read", "attribute", "summarise", "write"} <= set(result["stages"])
    rows = profile.text(result).splitlines()
    for name, seconds in result["stages"].items():
        assert any(r.split()[:2] == [name, f"{seconds:.2f}"] for r in rows), name


def test_stages_timed_whole_have_their_memory(result):
    for name in ("read", "write"):
        window = result["windows"][name]
        assert 0 < window["entry"] <= window["peak"] and window["exit"] <= window["peak"]
        assert window["seconds"] == pytest.approx(result["stages"][name], abs=0.05)
    assert result["peak_rss_bytes"] >= max(w["peak"] for w in result["windows"].values())


def test_the_functions_are_nsysmaps_by_cumulative_time(result):
    names = [f["function"] for f in result["functions"]]
    assert names[0] == "nsysmap.flow.verbs.analyse_file"
    assert all(n.startswith("nsysmap.") for n in names)
    cumulative = [f["cumulative_s"] for f in result["functions"]]
    assert cumulative == sorted(cumulative, reverse=True)


def test_the_native_time_is_asked_for_by_nsysmaps_own_functions(result):
    rows = result["asked"]
    assert 0 < len(rows) <= 15
    assert all(r["function"].startswith("nsysmap.") for r in rows)
    seconds = [r["native_s"] for r in rows]
    assert seconds == sorted(seconds, reverse=True)
    assert 0 < sum(r["share"] for r in rows) <= 1
    # the flow's driver asks for none itself: its stages' queries are their functions'
    assert not any(r["function"] == "nsysmap.flow.verbs.analyse_file" for r in rows)
    assert sum(r["native_s"] for r in rows) <= result["native_s"] <= result["asked_run_s"]
    lines = profile.text(result).splitlines()
    assert any(line.startswith("function (by native wall time asked for)") for line in lines)
    assert any(line.startswith("(native calls: ") for line in lines)
