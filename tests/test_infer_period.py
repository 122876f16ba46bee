"""The step period's longest gaps found without sorting every gap (nsysmap.infer.period)."""

from __future__ import annotations

import numpy as np
import pytest

from nsysmap.infer import period
from nsysmap.infer.period import longest_first, step_period


def test_the_docstring_example():
    gaps = np.array([5, 9, 1, 9, 7, 9])
    assert longest_first(gaps, 3).tolist() == [1, 3, 5]
    assert longest_first(gaps, 4).tolist() == [1, 3, 5, 4]
    assert longest_first(gaps, 0).tolist() == []
    assert longest_first(gaps, 9).tolist() == [1, 3, 5, 4, 0, 2]


@pytest.mark.parametrize("seed", range(20))
def test_the_first_k_of_a_stable_sort_of_every_gap(seed: int):
    """Many equal gaps (a few distinct values), so that the k-th is tied across the cut."""
    rng = np.random.default_rng(seed)
    gaps = rng.integers(0, 6, size=int(rng.integers(1, 400))) * 1_000
    whole = np.argsort(-gaps, kind="stable")
    for k in (1, 2, 5, 17, 64, gaps.size - 1, gaps.size):
        assert longest_first(gaps, k).tolist() == whole[:k].tolist()


def _steps(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A sequence of passes of one motif, a long launch gap before each, some noise."""
    rng = np.random.default_rng(seed)
    length, passes = int(rng.integers(12, 60)), int(rng.integers(3, 12))
    motif = rng.integers(0, 9, size=length)
    codes = np.tile(motif, passes)
    noise = rng.random(codes.size) < 0.03
    codes[noise] = rng.integers(0, 9, size=int(noise.sum()))
    gaps = rng.integers(1_000, 3_000, size=codes.size)
    gaps[::length] = rng.integers(50_000, 90_000, size=passes)
    gaps[rng.random(codes.size) < 0.01] = 70_000  # long gaps inside a pass too
    return codes.astype(np.int64), gaps.astype(np.int64)


@pytest.mark.parametrize("seed", range(25))
def test_the_period_is_the_one_every_gap_sorted_gives(seed: int, monkeypatch):
    codes, gaps = _steps(seed)
    found = step_period(codes, gaps)
    monkeypatch.setattr(period, "longest_first", lambda g, k: np.argsort(-g, kind="stable"))
    assert found == step_period(codes, gaps)
