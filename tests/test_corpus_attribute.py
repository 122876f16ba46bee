"""`nsysmap attribute` over every real export: conservation, exactly-once, reference agreement.

Both corpora: ../shared/corpus/nsys and the nsys exports of ../shared/corpus/real.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from nsysmap.flow.verbs import load_profile
from tests.cli_runner import nsysmap_cli
from tests.corpus import NO_GPU_FILES, all_export_files, corpus_path, independent_gpu_totals
from tests.reference import reference_attribution, reference_overlap

pytestmark = pytest.mark.corpus


@pytest.fixture(scope="module")
def attributed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Run the CLI once per corpus file; name -> (exit code, out dir)."""
    cache: dict = {}

    def run(name: str) -> tuple[int, object]:
        if name not in cache:
            out = tmp_path_factory.mktemp(name.split(".")[0])
            cache[name] = (
                nsysmap_cli(["attribute", "--quiet", str(corpus_path(name)), "-o", str(out)]),
                out,
            )
        return cache[name]

    return run


GPU_FILES = [n for n in all_export_files() if n not in NO_GPU_FILES]


@pytest.mark.parametrize("name", all_export_files())
def test_exit_code_and_outputs(name, attributed, capsys):
    code, out = attributed(name)
    err = capsys.readouterr().err.strip()
    if name in NO_GPU_FILES:
        assert code == 5
        assert err.count("\n") == 0 and "no GPU activity" in err and "nsys profile" in err
        return
    assert code == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["tables"]) == {
        "ops",
        "coverage",
        "by_phase",
        "by_step",
        "by_module",
        "by_module_phase",
        "by_kernel",
        "by_category",
        "overlap",
        "by_range",
        "inferred",
        "by_inferred_block",
        "idle",
        "stream_idle",
        "launch_cost",
        "structure",
    }
    assert manifest["input"]["sha256"] and manifest["output_schema_version"]
    # Inferred blocks partition each device's time like every other summary.
    inferred = pl.read_parquet(out / "by_inferred_block.parquet")
    ops = pl.read_parquet(out / "ops.parquet")
    assert inferred["time_ns"].sum() == ops["dur_ns"].sum()


@pytest.mark.parametrize("name", GPU_FILES)
def test_time_is_conserved_per_device_against_independent_sql(name, attributed):
    code, out = attributed(name)
    assert code == 0
    ops = pl.read_parquet(out / "ops.parquet")
    assert ops["op_id"].n_unique() == ops.height
    got = {
        dev: (n, total)
        for dev, n, total in ops.group_by("device_id")
        .agg(pl.len(), pl.col("dur_ns").sum())
        .iter_rows()
    }
    assert got == independent_gpu_totals(corpus_path(name))
    tables = ("by_phase", "by_module", "by_kernel", "by_category", "by_step", "coverage")
    for table in (*tables, "by_range"):
        summary = pl.read_parquet(out / f"{table}.parquet")
        sums = dict(summary.group_by("device_id").agg(pl.col("time_ns").sum()).iter_rows())
        assert sums == {dev: total for dev, (_, total) in got.items()}, table


@pytest.mark.parametrize("name", GPU_FILES)
def test_innermost_range_and_status_match_reference(name, attributed):
    _, out = attributed(name)
    ops = pl.read_parquet(out / "ops.parquet")
    report = load_profile(corpus_path(name))
    expected = reference_attribution(report.ops, report.api_calls, report.ranges)
    for op_id, range_id, status in ops.select("op_id", "range_id", "attribution").iter_rows():
        assert (range_id, status) == (
            expected[op_id]["range_id"],
            expected[op_id]["attribution"],
        ), op_id


@pytest.mark.parametrize("name", GPU_FILES)
def test_overlap_matches_reference_and_category_time(name, attributed):
    _, out = attributed(name)
    ops = pl.read_parquet(out / "ops.parquet")
    overlap = pl.read_parquet(out / "overlap.parquet")
    got = {
        (d, s): (c, o)
        for d, s, c, o in overlap.select("device_id", "step", "comm_ns", "overlapped_ns").rows()
    }
    assert got == reference_overlap(ops)
    categories = pl.read_parquet(out / "by_category.parquet")
    comm = categories.filter(pl.col("category") == "communication").select("device_id", "time_ns")
    per_device = overlap.group_by("device_id").agg(pl.col("comm_ns").sum())
    assert sorted(per_device.rows()) == sorted(comm.rows())
    if name.startswith("fastvideo"):  # NCCL SendRecv on both GPUs
        assert set(per_device["device_id"]) == {0, 1} and overlap["comm_ns"].min() > 0


def test_two_gpu_training_capture(attributed, capsys):
    name = "fastvideo_training_mfu_h100x2_before.sqlite"
    out_dir = attributed(name)[1]
    ops = pl.read_parquet(out_dir / "ops.parquet")
    independent = independent_gpu_totals(corpus_path(name))
    kernels = ops.filter(pl.col("kind") == "kernel")
    counts = dict(kernels.group_by("device_id").agg(pl.len()).iter_rows())
    assert counts == {0: 1993, 1: 2017}  # catalogue: kernels per device
    assert set(independent) == {0, 1}
    # The share of GPU time inside a range is reported, and FSDP spans give modules.
    in_range = ops.filter(pl.col("attribution") == "range")["dur_ns"].sum() / ops["dur_ns"].sum()
    assert 0.9 < in_range < 1.0
    assert ops.filter(pl.col("module").str.starts_with("blocks.")).height > 4000
    code = nsysmap_cli(["attribute", str(corpus_path(name)), "-o", str(out_dir)])
    text = capsys.readouterr().out
    assert code == 0 and f"Coverage: {100 * in_range:.1f}% of GPU time attributed" in text


SUMMARY_TABLES = ("coverage", "by_phase", "by_step", "by_module", "by_module_phase")
SUMMARY_TABLES += ("by_kernel", "by_category", "by_range", "overlap", "by_inferred_block")


def test_a_real_two_process_export_read_one_process_at_a_time_gives_the_same_tables(attributed):
    """FSDP training on two H100s, two processes in one export: attributed one
    process at a time (a memory budget too small for it), every table as whole."""
    name = "fastvideo_training_mfu_h100x2_before.sqlite"
    code, whole = attributed(name)
    split = whole.parent / "fastvideo-split"
    tiny = ["--memory-gb", "0.000001", "--quiet"]
    assert code == 0
    assert nsysmap_cli(["attribute", str(corpus_path(name)), "-o", str(split), *tiny]) == 0
    meta = json.loads((split / "manifest.json").read_text())["report_meta"]
    assert meta["processes_read_apart"] == "2"
    for table in SUMMARY_TABLES:
        a, b = (pl.read_parquet(d / f"{table}.parquet") for d in (whole, split))
        assert a.equals(b), table
