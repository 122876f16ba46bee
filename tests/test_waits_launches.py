"""launch_cost from the launch calls the attribution joined equals the one joined again.

The flow hands the waits tables each operation's launch-call duration as the
attribution found it (nsysmap.attribution.attribute.launch_durations) rather
than joining the API calls a second time (nsysmap.waits.tables.rejoined_launches,
which callers without the attribution's durations still use).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from devtools.synth import SynthExport
from nsysmap.attribution.attribute import attribute_chunks
from nsysmap.core.wait_schemas import WaitKind
from nsysmap.flow.verbs import analyse, load_profile
from nsysmap.waits import gaps
from nsysmap.waits.tables import (
    call_facts,
    is_sync_copy,
    launch_cost,
    rejoined_launches,
    waits_tables,
)
from tests.corpus import REAL, needs_corpus

MS = 1_000_000
PID, MAIN, SIDE = 7, 70, 71
# (module, stream, launching thread, launch at, launch call ms, runs from, runs to);
# no two launch calls last as long, so a call given to the wrong kernel shows.
KERNELS = [
    ("a", 7, MAIN, 1.0, 0.10, 2, 3),
    ("a", 7, MAIN, 1.5, 0.03, 3, 3.01),
    ("b", 7, MAIN, 6.0, 0.20, 7, 9),
    ("b", 8, SIDE, 6.5, 0.70, 8, 8.5),
    ("b", 8, SIDE, 9.0, 0.05, 12, 13),
]
MODULES = {"a": (0.5, 5), "b": (5.5, 14)}


def launched_export() -> SynthExport:
    """Kernels of two modules on two streams and threads, one more kernel with no launch call."""
    b = SynthExport()
    for tid in (MAIN, SIDE):
        b.range(PID, tid, 0, 20, "nsysmap:step:0")
    for path, (start, end) in MODULES.items():
        for tid in (MAIN, SIDE):
            b.range(PID, tid, start, end, f"nsysmap:fwd:Linear:{path}")
    for corr, (_, stream, tid, at, took, start, end) in enumerate(KERNELS, start=1):
        b.launch(PID, tid, at, at + took, corr)
        b.kernel(PID, 0, stream, start, end, corr, name=f"k{corr}")
    b.kernel(PID, 0, 7, 15, 16, 99, name="unlaunched")  # no call with correlation id 99
    return b


def _carried_and_rejoined(path: Path) -> tuple[dict, dict]:
    profile = load_profile(path)
    analysis = analyse(profile, infer=False)
    rejoined = waits_tables(analysis.ops, profile.api_calls, profile.ranges)
    return analysis.summaries.waits, rejoined


def test_launch_cost_is_the_launch_calls_of_each_module(tmp_path):
    carried, rejoined = _carried_and_rejoined(launched_export().write(tmp_path / "l.sqlite"))
    for name, table in carried.items():
        assert_frame_equal(table, rejoined[name])
    cost = carried["launch_cost"].filter(pl.col("module").is_not_null())
    got = {r["module"]: (r["launches"], r["launch_cpu_ns"]) for r in cost.iter_rows(named=True)}
    expected: dict[str, tuple[int, int]] = {}
    for module, *_, took, _start, _end in KERNELS:
        count, ns = expected.get(module, (0, 0))
        expected[module] = (count + 1, ns + round(took * MS))
    assert got.keys() == expected.keys()
    for module, (count, ns) in expected.items():  # ms to ns rounds each time once
        assert got[module][0] == count and abs(got[module][1] - ns) <= count
    unlaunched = carried["launch_cost"].filter(pl.col("module").is_null()).row(0, named=True)
    assert (unlaunched["ops"], unlaunched["launches"], unlaunched["launch_cpu_ns"]) == (1, 0, 0)


def test_the_attributions_launch_calls_are_those_joined_again(tmp_path):
    profile = load_profile(launched_export().write(tmp_path / "l.sqlite"))
    launches: list[pl.DataFrame] = []
    ops = pl.concat(attribute_chunks(profile, chunk_rows=2, launches=launches))
    assert len(launches) == 1 and launches[0].height == len(KERNELS)
    again = rejoined_launches(gaps.gpu_ops(ops), profile.api_calls)
    assert_frame_equal(launches[0].sort("op_id"), again.sort("op_id"))


REAL_NAMES = ["cs336a2_small_fwdbwd_emitnvtx_shapes_a100.sqlite"]
REAL_NAMES += ["hta_ddp_ns_resolution_rank0_v100.json.gz"]


@pytest.mark.corpus
@needs_corpus
@pytest.mark.parametrize("name", REAL_NAMES)
def test_real_profiles_give_the_same_waits_either_way(name):
    path = REAL / name
    if not path.is_file():
        pytest.skip(f"{path} is not in the corpus")
    carried, rejoined = _carried_and_rejoined(path)
    assert carried["launch_cost"]["launches"].sum() > 0
    for table, frame in carried.items():
        assert_frame_equal(frame, rejoined[table])


# Steps sorted by their own values (small non-negative), or by their ranks.
@pytest.mark.parametrize("steps", [(3, None, 1), (2**40, None, -5)])
def test_launch_cost_sorts_as_by_its_names_with_nulls_last(steps):
    """launch_cost sorts by ranks of codes, not names: the order must be the names' order
    (byte order, nulls last), whatever order the names first appear in."""
    phases = ["zeta", None, "Beta", "alpha", "beta"]
    modules = ["m.b", "m.a", None, "M.c", "m.a.x", "m"]
    rows = [
        (device, step, phase, module)
        for device in (1, 0)
        for step in steps
        for phase in phases
        for module in modules
    ]
    gpu = pl.DataFrame(
        rows, schema=["device_id", "step", "phase", "module"], orient="row"
    ).with_columns(
        op_id=pl.int_range(pl.len(), dtype=pl.Int64),
        start_ns=pl.int_range(pl.len(), dtype=pl.Int64) * 10,
        end_ns=pl.int_range(pl.len(), dtype=pl.Int64) * 10 + 5,
    )
    # Gaps before a few of the groups, two of them equally long.
    idle = gpu.filter(pl.col("op_id") % 7 == 0).select(
        "device_id",
        "step",
        "phase",
        "module",
        kind=pl.lit("launch", WaitKind),
        dur_ns=pl.when(pl.col("op_id") % 14 == 0).then(4).otherwise(pl.col("op_id")),
    )
    launches = gpu.select(
        "op_id",
        pid=pl.lit(1),
        correlation_id="op_id",  # one call per operation
        launch_start_ns="start_ns",
        launch_ns=pl.col("op_id") % 9,
        launch_api=pl.lit("cudaLaunchKernel"),
    )
    cost = launch_cost(gpu, launches, idle)
    assert cost.height == len(rows)
    by_names = cost.sort(
        ["device_id", "step", "idle_before_ns", "phase", "module"],
        descending=[False, False, True, False, False],
        nulls_last=True,
        maintain_order=True,
    )
    assert_frame_equal(cost, by_names)
    assert cost["idle_before_ns"].n_unique() > 3


def test_call_facts_count_a_call_of_several_operations_once():
    """call_facts groups only rows whose launch start repeats: it must agree with grouping
    every row by the whole call key, for calls of several operations (graph launches),
    calls that merely start at the same time (another process or correlation id),
    synchronous copies and calls with no name."""
    calls = [  # (pid, correlation_id, launch_start_ns, launch_api), one row per operation
        (1, 10, 100, "cudaGraphLaunch"),
        (1, 10, 100, "cudaGraphLaunch"),
        (1, 10, 100, "cudaGraphLaunch"),
        (2, 10, 100, "cudaLaunchKernel"),  # same start and id, another process
        (1, 11, 100, "cudaLaunchKernel"),  # same start, another call
        (1, 12, 200, "cudaMemcpy"),  # synchronous copy, alone
        (1, 13, 300, "cudaMemcpyAsync"),
        (1, 14, 400, None),
        (1, 15, 500, "cudaMemsetAsync"),
        (1, 15, 500, "cudaMemsetAsync"),
    ]
    launches = pl.DataFrame(
        calls, schema=["pid", "correlation_id", "launch_start_ns", "launch_api"], orient="row"
    ).select(
        op_id=pl.Series([5, 3, 9, 1, 2, 4, 6, 7, 8, 0]),
        pid="pid",
        correlation_id="correlation_id",
        launch_start_ns="launch_start_ns",
        launch_ns=pl.int_range(pl.len(), dtype=pl.Int64) + 1,
        launch_api="launch_api",
    )
    key = ["pid", "correlation_id", "launch_start_ns"]
    every_row = launches.select(
        "op_id",
        "launch_ns",
        call_first=pl.col("op_id") == pl.col("op_id").min().over(key),
        compared=(pl.len().over(key) == 1) & ~is_sync_copy(pl.col("launch_api")),
    )
    facts = call_facts(launches)
    assert_frame_equal(facts, every_row)
    assert facts["call_first"].sum() == 7 and facts["compared"].sum() == 4
    later = launches["launch_start_ns"] > 100
    assert_frame_equal(call_facts(launches.filter(later)), every_row.filter(later))


@pytest.mark.parametrize(
    "fact_ids",
    [
        [3, 0, 2, 1],  # every op, out of order: gathers
        [2, 7],  # some ops, one id no op has: gathers
        [2, 2, 1],  # an op_id twice: the join (a row per match)
        [1, 10**9],  # ids far apart: the join
        [],
    ],
)
def test_facts_reach_the_operations_as_a_left_join_would(fact_ids):
    """launch_cost's op_id lookup (`_by_op_id`) gives the left join's rows, in order."""
    from nsysmap.waits.tables import _by_op_id

    ops = pl.DataFrame({"op_id": [2, 0, None, 3, 1, 5], "dur_ns": [1, 2, 3, 4, 5, 6]})
    facts = pl.DataFrame(
        {"op_id": fact_ids, "launch_ns": [10 * i for i in range(len(fact_ids))]},
        schema={"op_id": pl.Int64, "launch_ns": pl.Int64},
    )
    joined = ops.join(facts, on="op_id", how="left", maintain_order="left")
    assert _by_op_id(ops, facts).equals(joined)
