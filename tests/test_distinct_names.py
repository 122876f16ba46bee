"""Range names tested once per distinct name give the answers of testing every name."""

from __future__ import annotations

import polars as pl
import pytest

from nsysmap.attribution import distinct_names
from nsysmap.attribution.attribute import attribute
from nsysmap.attribution.distinct_names import DistinctNames
from nsysmap.load import load_profile
from nsysmap.synth.bulk import write_export
from nsysmap.synth.tile import gpt_tables

NAMES = pl.Series(
    "name",
    ["aten::mm, seq = 1", None, "nsysmap:step:0", "aten::mm, seq = 1", "b", None, "b", "b"],
)
CODED, UNCODED = 1.0, 0.0  # CODED_SHARE that always codes, that never does


@pytest.mark.parametrize("share", [CODED, UNCODED])
def test_a_test_of_the_distinct_names_is_the_test_of_every_name(monkeypatch, share):
    monkeypatch.setattr(distinct_names, "CODED_SHARE", share)
    each = DistinctNames.of(NAMES)
    assert (each.at is not None) == (share == CODED)
    if share == CODED:
        assert sorted(each.names.to_list()) == ["aten::mm, seq = 1", "b", "nsysmap:step:0"]
    hit = each.names.str.contains("seq", literal=True)
    assert each.per_range(hit).to_list() == NAMES.str.contains("seq", literal=True).to_list()
    b = each.ranges_named((each.names == "b").fill_null(False).arg_true())
    assert b.to_list() == [4, 6, 7]
    at = pl.Series([3, None, 2], dtype=pl.UInt32)
    assert each.names.gather(each.index(at)).to_list() == NAMES.gather(at).to_list()


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """A small GPT-2-like export of two processes: every operator name comes twice."""
    path = tmp_path_factory.mktemp("distinct") / "two.sqlite"
    write_export(path, gpt_tables(2000, seed=3, n_layer=2, processes=2))
    return load_profile(path)


def test_attribution_is_the_same_with_names_coded_or_not(monkeypatch, two_processes):
    """Scope's name tests, the forward `seq` search and the operators' labels read the
    distinct names when they repeat enough: the OPS rows do not change."""
    names = two_processes.ranges["name"]
    assert names.n_unique() <= distinct_names.CODED_SHARE * names.len()  # coded by default
    coded = attribute(two_processes)
    monkeypatch.setattr(distinct_names, "CODED_SHARE", UNCODED)
    uncoded = attribute(two_processes)
    assert coded.equals(uncoded)
    assert coded["module"].is_not_null().any() and coded["aten_op"].is_not_null().any()
