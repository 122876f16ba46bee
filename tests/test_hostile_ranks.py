"""The multi-rank texts against the hostile-names corpus (tests/hostile_names.py).

Two hostile exports as the ranks of one job, and a third report, damaged, whose
file name holds terminal controls, on a local Dask cluster: the summary of
`nsysmap attribute` and the cross-rank report.md of `nsysmap report` show every
name as data (tests/test_hostile_names.py has the checks of one report).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from distributed import LocalCluster

from nsysmap.core.inert import visible
from tests.cli_runner import invoke
from tests.hostile_names import TERMINAL, hostile_export
from tests.test_hostile_names import assert_terminal_safe, markdown_tokens

pytestmark = pytest.mark.dask  # a local Dask cluster

MARKUP_TOKENS = {"html_block", "html_inline", "link_open", "image"}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str, str]:
    inputs = tmp_path_factory.mktemp("inputs")
    hostile_export(inputs / "r0.sqlite")
    hostile_export(inputs / "r1.sqlite", slower=0.3)
    damaged = hostile_export(inputs / f"r2 {TERMINAL}.sqlite")
    damaged.write_bytes(damaged.read_bytes()[:20_000])
    out = tmp_path_factory.mktemp("out")
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        argv = ["attribute", inputs, "-o", out, "--scheduler", cluster.scheduler_address]
        _, stdout, stderr = invoke(argv)
    code, report, report_err = invoke(["report", out])
    assert code == 0, report_err
    return out, stdout + stderr, report, (out / "report.md").read_text()


def test_the_rank_summary_shows_control_characters_escaped(ranks):
    _, summary, _, _ = ranks
    assert_terminal_safe(summary)
    assert "failed" in summary and visible(TERMINAL)[:20] in summary


def test_the_rank_report_shows_names_as_data(ranks):
    _, _, printed, markdown = ranks
    for text in (printed, markdown):
        assert_terminal_safe(text)
    tokens = markdown_tokens(markdown)
    assert not [t.type for t in tokens if t.type in MARKUP_TOKENS]
    code = [t.content for t in tokens if t.type == "code_inline"]
    assert any(visible(TERMINAL) in c for c in code)  # a module named by the profile
