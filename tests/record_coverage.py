"""How much of a training profile's GPU time its records alone give a phase.

For each real training profile of ../shared/corpus, attribution is run four
ways: as delivered, and with ranges removed in three degrees (`STRIPS`):

* `phases`: the users' own phase ranges (`## forward ##`, `backward pass`,
  ...), keeping what PyTorch writes itself (`ProfilerStep#N`,
  `Optimizer.step#...`, `Optimizer.zero_grad#...`);
* `phases+steps`: the step ranges too: steps must come from optimizer
  boundaries;
* `all`: PyTorch's `Optimizer.*` ranges too: nothing named but the threads,
  the autograd node and module records and the kernels.

Coverage is the share of all GPU time (every operation's duration) whose phase
is `forward`, `backward` or `optimizer`; `labelled` adds the other phases
(`data`, `zero_grad`, `loss`) a range gives. Steps found are the record-
or range-given steps, the truth the `ProfilerStep#N` count as delivered.

Run `python -m tests.record_coverage` from the repository root for the table
(docs/inference.md, "Phases from PyTorch's records").
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import polars as pl

from nsysmap.attribution.attribute import attribute
from nsysmap.attribution.normalise import normalise
from nsysmap.attribution.rules import BUILTIN
from nsysmap.core.profile import NestedProfile, Profile
from nsysmap.read.nsys.nsys_sqlite import read_sqlite
from nsysmap.read.torch.torch_trace import read_trace

TRAINING = ("forward", "backward", "optimizer")
# Which ranges each degree removes: (phase ranges, Optimizer.* ranges, step ranges).
STRIPS = {
    "as delivered": None,
    "phases": (True, False, False),
    "phases+steps": (True, False, True),
    "all": (True, True, True),
}
# The real training profiles: forward, backward and (but for cs336's) optimizer work.
TRAINING_PROFILES = (
    "hta_ddp_ns_resolution_rank0_v100.json.gz",
    "hta_recsys_shapes_rank0_a100.json.gz",
    "param_dlrm_ddp_rank0of8_nccl_alltoall_v100.pt.trace.json",
    "param_dlrm_ddp_rank1of8_nccl_alltoall_v100.pt.trace.json",
    "aiperf_hf_gpt2_train_step_with_modules_stack_b200.json",
    "cs336a2_small_fwdbwd_emitnvtx_shapes_a100.sqlite",
    "fastvideo_training_mfu_h100x2_before.sqlite",
)


@dataclass(frozen=True)
class Coverage:
    """One profile attributed with one degree of ranges removed."""

    profile: str
    strip: str
    coverage: float  # share of GPU time forward, backward or optimizer
    labelled: float  # share of GPU time with any phase
    unlaunched: float  # share of GPU time without a launch call (in a process with some)
    unlaunched_labelled: float  # share of GPU time without a launch call, with a phase
    unlaunched_stepped: float  # share of GPU time without a launch call, with a step
    steps: int  # distinct steps found
    true_steps: int  # ProfilerStep#N ranges as delivered
    step_source: str | None  # "range", "records", or None without steps


def raw_profile(path: Path) -> Profile:
    return read_sqlite(path) if path.suffix == ".sqlite" else read_trace(path)


def without(
    raw: Profile, *, phases: bool = True, optimizer: bool = False, steps: bool = False
) -> NestedProfile:
    """`raw` normalised without the ranges that name phases (`phases`), PyTorch's
    `Optimizer.step#...` / `Optimizer.zero_grad#...` (`optimizer`: kept unless said,
    as they are PyTorch's own records), and the step ranges (`steps`)."""
    name = pl.col("name")
    pytorch = name.str.starts_with("Optimizer.")
    drop = BUILTIN.phase_expr(name).is_not_null() & (pl.lit(phases) & ~pytorch | pl.lit(optimizer))
    if steps:
        drop = drop | BUILTIN.step_expr(name).is_not_null()
    return normalise(replace(raw, ranges=raw.ranges.filter(~drop.fill_null(False))))


@cache
def _raw(path: Path) -> Profile:
    return raw_profile(path)


def attributed(path: Path, strip: str) -> pl.DataFrame:
    """The ops of `path` attributed with the ranges of degree `strip` removed."""
    raw, degree = _raw(path), STRIPS[strip]
    if degree is None:
        return attribute(normalise(raw))
    phases, optimizer, steps = degree
    return attribute(without(raw, phases=phases, optimizer=optimizer, steps=steps))


def measure(path: Path, strip: str) -> Coverage:
    ops = attributed(path, strip)
    total = ops["dur_ns"].sum()
    training = ops.filter(pl.col("phase").is_in(TRAINING))["dur_ns"].sum()
    labelled = ops.filter(pl.col("phase").is_not_null())["dur_ns"].sum()
    launched = pl.col("launch_start_ns").is_not_null()
    unlaunched = ops.filter(~launched & launched.any().over("pid"))
    raw_steps = _raw(path).ranges.filter(BUILTIN.step_expr(pl.col("name")).is_not_null())
    sources = ops["step_source"].drop_nulls().cast(pl.String).unique().sort().to_list()
    return Coverage(
        profile=path.name,
        strip=strip,
        coverage=training / total if total else 0.0,
        labelled=labelled / total if total else 0.0,
        unlaunched=unlaunched["dur_ns"].sum() / total if total else 0.0,
        unlaunched_labelled=unlaunched.filter(pl.col("phase").is_not_null())["dur_ns"].sum()
        / (total or 1),
        unlaunched_stepped=unlaunched.filter(pl.col("step").is_not_null())["dur_ns"].sum()
        / (total or 1),
        steps=ops["step"].drop_nulls().n_unique(),
        true_steps=raw_steps["name"].n_unique(),
        step_source="+".join(sources) or None,
    )


def table(folders: list[Path]) -> list[Coverage]:
    """Every training profile found in `folders`, measured at every degree."""
    found = {p.name: p for folder in folders for p in folder.glob("*") if p.is_file()}
    return [
        measure(found[name], strip)
        for name in TRAINING_PROFILES
        if name in found
        for strip in STRIPS
    ]


def main() -> None:
    corpus = Path(__file__).parents[1] / ".." / "shared" / "corpus"
    folders = [corpus / sub for sub in ("nsys", "real", "real2")]
    print("| profile | removed | forward+backward+optimizer | any phase | not launched "
          "(with a phase) | steps (true) |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- |")
    for row in table(folders):
        steps = f"{row.steps} {row.step_source or ''} ({row.true_steps})"
        print(
            f"| `{row.profile}` | {row.strip} | {row.coverage:.2%} | {row.labelled:.2%} | "
            f"{row.unlaunched:.2%} ({row.unlaunched_labelled:.2%}) | {steps} |"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
