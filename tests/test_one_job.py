"""Reports that do not look like the ranks of one job: named in a warning, never silently merged.

Two real traces of unrelated runs (a DDP job on V100s, a mixture-of-experts
forward on an A100) must raise doubts; the two real ranks of one DLRM job,
and the two processes of one FastVideo export, must raise none. Each report
is attributed in this process (`attribute_one`, what a Dask worker runs), so
only the one end-to-end test starts a cluster.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from nsysmap.many.collect import output_tables
from nsysmap.many.rank_ids import RankOf, assign_ranks
from nsysmap.many.same_job import MIN_SHARED_KERNEL_TIME, doubts
from nsysmap.many.task import OK, Outcome, Unit, attribute_one
from tests.cli_runner import invoke
from tests.corpus import corpus_path

V100_DDP = "hta_ddp_ns_resolution_rank0_v100.json.gz"
A100_MOE = "switchtransformer_moe_fwd_with_modules_a100.json"
DLRM = [f"param_dlrm_ddp_rank{r}of8_nccl_alltoall_v100.pt.trace.json" for r in (0, 1)]
FASTVIDEO = "fastvideo_training_mfu_h100x2_before.sqlite"  # two processes, one job


def _doubts_of(names: list[str], work: Path) -> list[str]:
    outcomes = [attribute_one(i, str(corpus_path(n)), str(work), {}) for i, n in enumerate(names)]
    assert all(o.status == OK for o in outcomes), [o.error for o in outcomes]
    ranks, _ = assign_ranks(outcomes)
    return doubts(outcomes, ranks, output_tables(outcomes, ranks))


@pytest.mark.corpus
def test_two_unrelated_real_traces_raise_doubts(tmp_path):
    found = _doubts_of([V100_DDP, A100_MOE], tmp_path)
    assert found[0] == (
        "the ranks run on different GPU models "
        "(Tesla V100-SXM2-32GB in rank 0; NVIDIA A100 80GB PCIe in rank 1)"
    )
    assert found[1].startswith("rank 1 and rank 0 share kernels for only ")
    assert len(found) == 2


@pytest.mark.corpus
@pytest.mark.parametrize("names", [DLRM, [FASTVIDEO]], ids=["dlrm_two_traces", "fastvideo"])
def test_the_ranks_of_one_real_job_raise_none(tmp_path, names):
    assert _doubts_of(names, tmp_path) == []


# ------------------------------------------------------------- each rule alone
def _ranks(
    meta: list[dict[str, str]],
    steps: list[list[int]],
    kernels: list[dict[str, int]],
    models: list[str] = ("GPU A", "GPU A"),  # type: ignore[assignment]
) -> list[str]:
    """The doubts about made-up ranks: one report per rank, its meta, steps and kernel times."""
    outcomes, ranks = [], []
    for i, facts in enumerate(meta):
        outcomes.append(Outcome(i, f"r{i}.json", OK, meta=facts, device_names={0: models[i]}))
        ranks.append(RankOf(i, i, f"r{i}.json", Unit(1, (0,), 1, 1, ""), "file_order", None))
    rank_steps = pl.DataFrame(
        [(r, s) for r, numbers in enumerate(steps) for s in numbers],
        schema={"rank": pl.Int64, "step": pl.Int64},
        orient="row",
    )
    by_kernel = pl.DataFrame(
        [(r, name, ns) for r, times in enumerate(kernels) for name, ns in times.items()],
        schema={"rank": pl.Int64, "name": pl.String, "time_ns": pl.Int64},
        orient="row",
    )
    return doubts(outcomes, ranks, {"rank_steps": rank_steps, "by_kernel": by_kernel})


SAME = {"gemm": 80, "nccl": 20}


def test_alike_ranks_raise_none():
    assert _ranks([{}, {}], [[1, 2], [2, 3]], [SAME, SAME]) == []


def test_ranks_without_step_numbers_are_not_compared_by_step():
    assert _ranks([{}, {}], [[1, 2], []], [SAME, SAME]) == []


@pytest.mark.parametrize(
    ("meta", "steps", "kernels", "models", "expected"),
    [
        ([{}, {}], [[1], [1]], [SAME, SAME], ["GPU A", "GPU B"],
         "the ranks run on different GPU models (GPU A in rank 0; GPU B in rank 1)"),
        ([{"backend": "nsys"}, {"backend": "torch.profiler"}], [[1], [1]], [SAME, SAME], None,
         "the reports come from different profilers (nsys in r0.json; torch.profiler in r1.json)"),
        ([{"world_size": "8"}, {"world_size": "2"}], [[1], [1]], [SAME, SAME], None,
         "the reports declare different world sizes (8 in r0.json; 2 in r1.json)"),
        ([{"rank": "0"}, {"rank": "0"}], [[1], [1]], [SAME, SAME], None,
         "r0.json and r1.json both declare rank 0"),
        ([{}, {}], [[1, 2], [7, 9]], [SAME, SAME], None,
         "no step number is common to all ranks (rank 0: steps 1-2; rank 1: steps 7-9)"),
        ([{}, {}], [[1], [1]], [SAME, {"gemm": 45, "other": 55}], None,
         "rank 1 and rank 0 share kernels for only 45% of their GPU time"),
        ([{}, {}], [[1], [1]], [{"gemm": 45, "other": 55}, SAME], None,
         "rank 1 and rank 0 share kernels for only 45% of their GPU time"),
    ],
    ids=["gpu_models", "profilers", "world_sizes", "declared", "steps", "kernels", "kernels_back"],
)  # fmt: skip
def test_each_rule_names_its_doubt(meta, steps, kernels, models, expected):
    assert _ranks(meta, steps, kernels, models or ["GPU A", "GPU A"]) == [expected]


def test_the_kernel_rule_stops_at_its_threshold():
    shared = round(MIN_SHARED_KERNEL_TIME * 100)
    just = {"gemm": shared, "other": 100 - shared}
    assert _ranks([{}, {}], [[1], [1]], [{"gemm": 100}, just]) == []


# --------------------------------------------------------------- end to end
@pytest.mark.dask
def test_attribute_warns_and_the_report_says_so(tmp_path):
    folder = tmp_path / "profiles"
    folder.mkdir()
    for name in (V100_DDP, A100_MOE):
        shutil.copyfile(corpus_path(name), folder / name)
    out = tmp_path / "out"
    code, stdout, stderr = invoke(["attribute", str(folder), "-o", str(out), "--workers", "1"])
    assert code == 0, stderr
    warning = [line for line in stderr.splitlines() if line.startswith("nsysmap: warning:")]
    assert len(warning) == 1
    assert warning[0].startswith(
        "nsysmap: warning: these reports may not be the ranks of one job: the ranks run on "
        "different GPU models (Tesla V100-SXM2-32GB in rank 0; NVIDIA A100 80GB PCIe in rank 1)"
    )
    assert "warning: these reports may not be the ranks of one job" in stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["one_job_doubts"]) == 2
    code, _, stderr = invoke(["report", str(out), "--quiet"])
    assert code == 0, stderr
    assert (
        "**Warning: these reports may not be the ranks of one job**"
        in (out / "report.md").read_text()
    )
