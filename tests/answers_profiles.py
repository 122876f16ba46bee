"""The profiles the answers.json tests run on: both samples and every real corpus profile.

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

from nsysmap.errors import ExitCode, NsysmapError
from nsysmap.pipeline import analyse_file
from tests.cli_runner import nsysmap_cli
from tests.corpus import corpus_path, real_profiles
from tests.samples import SAMPLE_RUNS, SAMPLES

SAMPLE_FILES = tuple(f"gpt2_tiny_{run}.sqlite" for run in SAMPLE_RUNS)


@dataclass(frozen=True)
class Reported:
    """One attributed profile and the report `nsysmap report` wrote for it."""

    out: Path  # the output directory: ops.parquet, by_range.parquet, answers.json, report.md
    answers: dict[str, Any]
    markdown: str


def profile_params() -> list[Any]:
    """Both samples, then every real profile (marked `corpus`)."""
    samples = [pytest.param(name, id=name) for name in SAMPLE_FILES]
    corpus = [pytest.param(n, id=n, marks=pytest.mark.corpus) for n in real_profiles()]
    return samples + corpus


def profile_path(name: str) -> Path:
    """A sample's path, or a corpus file's (skips when the corpus is absent)."""
    return SAMPLES / name if name in SAMPLE_FILES else corpus_path(name)


def attributed(name: str, out: Path) -> Path:
    """`nsysmap attribute` of profile `name` into `out`; skips a profile without GPU work."""
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
