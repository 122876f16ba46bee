"""What to fix first in a profile without step or phase ranges: its structure's measured region
is the step, so set-up work before it (copies, synchronisations) makes no finding.

The run is planned as in tests/test_findings_rules.py, without ranges, after
a set-up of synchronous copies; the structure (structure.parquet's regions) is
given by hand: set-up up to a launch (the first kernel's, or a copy's), measured
from it on.
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl
import pytest

from nsysmap.diff.fix_check import median_times
from nsysmap.findings import process_findings
from nsysmap.flow.analysis import Analysis
from nsysmap.flow.verbs import analyse, load_profile
from nsysmap.report.answers import RunData
from nsysmap.structure.table import STRUCTURE
from tests.findings_plans import HTOD, K, Plan, export

MS = 1_000_000
SGEMM = "ampere_sgemm_128x64_tn"
EW = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>()"
STEPS = 4
PASS = Plan([K(SGEMM, 2.0), K(EW, 0.5), K(SGEMM, 2.0)], steps=STEPS, ranged=False)
# Set-up: host-to-device copies by plain cudaMemcpy, the host synchronising before each.
COPY = K("weights", 3.0, copy=HTOD, api="cudaMemcpy_v3020", gap=1.0, sync=True)
SETUP = Plan([COPY] * 5, steps=1, ranged=False)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Analysis:
    path = tmp_path_factory.mktemp("unranged") / "run.sqlite"
    return analyse(load_profile(export(PASS, path, before=SETUP)))


def regions(run: Analysis, *names: str, kind: str = "kernel", skip: int = 0) -> pl.DataFrame:
    """Region rows over the run's launches: with two names, the first up to the launch of
    the first operation of `kind` after `skip` of them, the second from it; with one name,
    all of them."""
    ops = run.ops
    first, last = ops["launch_start_ns"].min(), ops["launch_start_ns"].max()
    split = ops.filter(pl.col("kind") == kind)["launch_start_ns"].sort()[skip]
    spans = [(first, last)] if len(names) == 1 else [(first, split - 1), (split, last)]
    rows = [
        {
            "device_id": 0,
            "pid": ops["pid"][0],
            "kind": "region",
            "index": i,
            "region": name,
            "start_ns": start,
            "end_ns": end,
            "confidence": 1.0,
        }
        for i, (name, (start, end)) in enumerate(zip(names, spans, strict=True))
    ]
    return pl.DataFrame(rows).select(
        pl.lit(None).cast(dtype).alias(c) if c not in rows[0] else pl.col(c).cast(dtype)
        for c, dtype in STRUCTURE.items()
    )


def findings(run: Analysis, structure: pl.DataFrame | None) -> pl.DataFrame:
    meta = dict(zip(run.profile.meta["key"], run.profile.meta["value"], strict=True))
    waits = run.summaries.waits
    return process_findings(run.store.scan(), waits, run.profile.devices, meta, structure)


def rules(table: pl.DataFrame) -> set[str]:
    return set(table["rule"])


def test_without_a_structure_the_set_up_counts_in_the_one_step(run):
    table = findings(run, None)
    assert {"sync_copy", "host_sync", "fp32_gemm"} <= rules(table)
    assert all("set-up included" in n for n in table["needs"])


def test_the_measured_region_leaves_the_set_up_out(run):
    table = findings(run, regions(run, "setup", "measured"))
    assert rules(table) == {"fp32_gemm"}
    (row,) = table.rows(named=True)
    assert row["basis_ns_per_step"] == STEPS * 2 * 2 * MS  # the passes' SGEMMs, not the copies
    assert row["confidence"] == "low" and "structure.parquet" in row["needs"]


def test_copies_inside_the_measured_region_make_findings(run):
    """The same run with the set-up's last three copies inside the measured region: they
    are measured (their time and the syncs between them), the first two are not."""
    table = findings(run, regions(run, "setup", "measured", kind="memcpy", skip=2))
    assert rules(table) == {"sync_copy", "host_sync", "fp32_gemm"}
    copies = table.filter(pl.col("rule") == "sync_copy").row(0, named=True)
    assert copies["basis_ns_per_step"] == 3 * 3 * MS
    assert copies["evidence"].startswith("3 host-to-device copies")
    syncs = table.filter(pl.col("rule") == "host_sync").row(0, named=True)
    assert syncs["basis_ns_per_step"] == 2 * 1 * MS  # the gaps before the 4th and 5th copy
    assert all("structure.parquet" in n for n in table["needs"])


def test_a_structure_that_measures_everything_changes_nothing(run):
    assert findings(run, regions(run, "measured")).equals(findings(run, None))


def test_a_fix_is_checked_over_the_measured_region_as_the_findings_counted(run):
    """`nsysmap diff`'s step time, what a fix's saving is measured against: without steps,
    the measured region's wall time (the findings' one step), not the capture's."""
    ops = run.store.scan().collect()
    data = RunData("a", ops, {})
    structure = regions(run, "setup", "measured")
    whole, measured = median_times(data), median_times(replace(data, structure=structure))
    kept = ops.filter(pl.col("launch_start_ns") >= structure["start_ns"][1])
    assert measured == {0: float(kept["end_ns"].max() - kept["start_ns"].min())}
    assert whole == {0: float(ops["end_ns"].max() - ops["start_ns"].min())} != measured
