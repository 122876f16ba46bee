"""The profiles the answers.json tests run on: both samples, a synthetic profile with
warm-up and nested forward ranges (`synthetic_profile`), and every profile of every corpus set.

`profile_params()` lists them for `pytest.mark.parametrize` (the corpus ones
marked `corpus`); `reported(name, root)` attributes one into `root` and runs
`nsysmap report` on it, skipping a profile that attribution refuses for want
of GPU work (exit code 5: NVTX only, no CUDA tables) and a corpus that is
absent, each with its reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nsysmap.core.errors import ExitCode, NsysmapError
from nsysmap.core.profile import NestedProfile
from nsysmap.flow.verbs import analyse, analyse_file, write
from tests.cli_runner import nsysmap_cli
from tests.corpus import corpus_files, corpus_path, real_profiles
from tests.frames import Frames
from tests.samples import SAMPLE_RUNS, SAMPLES, attributed_sample

SAMPLE_FILES = tuple(f"gpt2_tiny_{run}.sqlite" for run in SAMPLE_RUNS)


@dataclass(frozen=True)
class Reported:
    """One attributed profile and the report `nsysmap report` wrote for it."""

    out: Path  # the output directory: ops.parquet, by_range.parquet, answers.json, report.md
    answers: dict[str, Any]
    markdown: str


def profile_params() -> list[Any]:
    """Both samples and a synthetic profile, then every real profile (marked `corpus`)."""
    samples = [pytest.param(name, id=name) for name in (*SAMPLE_FILES, SYNTHETIC)]
    every = dict.fromkeys([*corpus_files(), *real_profiles()])  # every set, once each
    corpus = [pytest.param(n, id=n, marks=pytest.mark.corpus) for n in every]
    return samples + corpus


def profile_path(name: str) -> Path:
    """A sample's path, or a corpus file's (skips when the corpus is absent)."""
    return SAMPLES / name if name in SAMPLE_FILES else corpus_path(name)


def attributed(name: str, out: Path) -> Path:
    """`nsysmap attribute` of profile `name` into `out`; skips a profile without GPU work."""
    if name == SYNTHETIC:
        write(analyse(synthetic_profile()), out)
        return out
    if name in SAMPLE_FILES:
        return attributed_sample(SAMPLE_RUNS[SAMPLE_FILES.index(name)], out)
    try:
        analyse_file(profile_path(name), out)
    except NsysmapError as error:
        if error.exit_code != ExitCode.NO_GPU_DATA:
            raise
        pytest.skip(f"{name}: attribute refuses it (exit code 5): {error}")
    return out


def reported(name: str, out: Path) -> Reported:
    """Profile `name` attributed into `out`, and `nsysmap report` run on it."""
    attributed(name, out)
    assert nsysmap_cli(["report", "--quiet", out]) == 0
    answers = json.loads((out / "answers.json").read_text())
    return Reported(out, answers, (out / "report.md").read_text())


SYNTHETIC = "synthetic_warmup_nested_forward"
GEMM, SOFTMAX, ADD = "ampere_sgemm_128x64_tn", "softmax_warp_forward", "elementwise_add_kernel"


def synthetic_profile() -> NestedProfile:
    """No step ranges; a warm-up range holding a forward, two forward passes (one with a
    forward range nested inside and attention ranges), then a backward ending in a CUDA
    graph replay (milliseconds)::

        |- warmup ----------|- forward pass -------------------------|- forward pass -|- backward -|
          |- forward -|        |- ## forward ##-| |- attention ------|
                                                   |- scores -||- softmax -|
    """
    f, main = Frames(), 1
    f.range(main, "warmup", 0, 20)
    f.range(main, "forward", 1, 10)
    f.kernel(main, 2, GEMM, dur=3)
    f.kernel(main, 6, SOFTMAX)
    f.range(main, "forward pass", 20, 50)
    f.kernel(main, 21, GEMM, dur=2)
    f.range(main, "## forward ##", 22, 30)
    f.kernel(main, 23, GEMM, dur=4)
    f.range(main, "attention", 30, 45)
    f.range(main, "computing attention scores", 31, 34)
    f.kernel(main, 32, GEMM, dur=2)
    f.range(main, "computing softmax", 35, 38)
    f.kernel(main, 36, SOFTMAX)
    f.range(main, "forward pass", 50, 60)
    f.kernel(main, 51, GEMM, dur=2)
    f.kernel(main, 55, ADD)
    f.range(main, "backward", 60, 80)
    f.kernel(main, 61, GEMM, dur=3)
    f.kernel(main, 65, GEMM, dur=3)
    f.kernel(main, 70, ADD)
    f.kernel(main, 75, "CUDA graph replay", kind="graph", dur=15)  # its kernels unseen
    return f.profile()
