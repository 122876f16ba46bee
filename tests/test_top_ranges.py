"""The terminal summary's top ranges on nsysmap's own runs: the ranges that explain the time.

The sample export is what `nsysmap run` records (nsysmap's step, phase and
module ranges); autograd's `BackwardHookFunction` ranges, slivers of the
time, are added to it as a real run has them.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from nsysmap.flow.verbs import analyse_file
from nsysmap.summaries.top_ranges import SLIVER
from sample_reports.build import MAIN, PID, build

HOOK = "BackwardHookFunction"
OUTSIDE = re.compile(r"^  ([\d,.]+) ms \((\S+)%\) is inside none of these ranges")


def _sample(path: Path, hooks: int = 0) -> Path:
    """The training sample, with `hooks` sliver ranges around forward launches."""
    export = build(train=True)
    if hooks:
        plain = path.with_name("plain.sqlite")
        export.write(plain)
        ops = analyse_file(plain, path.with_name("plain_out")).ops
        # 1 ms kernels of the first step's forward, one per module: a path each.
        forward = ops.filter(
            (pl.col("phase") == "forward") & (pl.col("step") == 0) & (pl.col("dur_ns") == 10**6)
        ).unique("module", keep="first", maintain_order=True)
        assert forward.height >= hooks
        for at in forward["launch_start_ns"].head(hooks).to_list():
            export.range(PID, MAIN, at // 10**6, at // 10**6 + 1, HOOK)
    export.write(path)
    return path


def _listed(text: str) -> tuple[list[list[str]], list[str]]:
    """(rows of the top ranges section split in words, the lines after them)."""
    section = text.split("Top ranges")[1].split("\n\n")[0].splitlines()[1:]
    rows = [line.split() for line in section if not line.startswith("  ...")]
    return [r for r in rows if not OUTSIDE.match(" ".join(["", "", *r]))], section


@pytest.fixture(params=[0, 6], ids=["sample", "with_hook_slivers"])
def attributed(request, tmp_path) -> tuple[str, pl.DataFrame, pl.DataFrame]:
    path = _sample(tmp_path / "run.sqlite", request.param)
    text = analyse_file(path, tmp_path / "out").summary_text
    ops = pl.read_parquet(tmp_path / "out" / "ops.parquet")
    by_range = pl.read_parquet(tmp_path / "out" / "by_range.parquet")
    if request.param:
        assert by_range["range_name"].eq(HOOK).sum() > 0  # the slivers are there
    return text, ops, by_range


@pytest.mark.slow
def test_no_listed_range_is_a_sliver(attributed):
    text, _, by_range = attributed
    rows, _ = _listed(text)
    assert rows, text
    total = by_range["time_ns"].sum()
    inside = dict(by_range.group_by("range_path").agg(pl.col("inclusive_ns").sum()).rows())
    shown = [" ".join(row[:-4]) for row in rows]
    assert all(inside[path] >= SLIVER * total for path in shown), shown
    assert not any(HOOK in path for path in shown)
    assert shown[0] == "nsysmap:step:*"  # the range holding nearly all the time


@pytest.mark.slow
def test_the_time_inside_none_is_recomputed_from_the_operations(attributed):
    text, ops, _ = attributed
    _, lines = _listed(text)
    (line,) = [line for line in lines if OUTSIDE.match(line)]
    ms, share = OUTSIDE.match(line).groups()
    # Independently: the listed ranges are inside nsysmap's steps, and every operation
    # launched in a step, or given its phase by a range in one, has that step.
    outside = ops.filter(pl.col("step").is_null())["dur_ns"].sum()
    assert float(ms.replace(",", "")) == pytest.approx(outside / 1e6)
    assert float(share) == pytest.approx(100 * outside / ops["dur_ns"].sum(), abs=0.05)
