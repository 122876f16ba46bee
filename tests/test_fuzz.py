"""Fuzzing `nsysmap attribute` (tests/fuzz.py): every input gets a right answer.

Each case must end without a traceback or an internal error, within its time
limit, with one line on stderr when it fails, and with its totals conserved
against an independent sum when it succeeds. The quick set and every NVTX and
runtime table mutation of tests/fuzz_tables.py run in the suite (under a minute
on 2 cores); the larger run is marked slow and sized by
NSYSMAP_FUZZ_CASES (docs/cli.md gives the command and its latest figures).
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from tests.fuzz import Case, cases, problems, run_cases, table_cases

pytestmark = pytest.mark.slow  # the seeded fuzz cases run the CLI on every corpus file and misuse

SEED = 16
QUICK_CASES = 150


def _param(case: Case) -> pytest.param:
    return pytest.param(case, id=case.id)


QUICK = cases(SEED, QUICK_CASES)


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return run_cases(QUICK, tmp_path_factory.mktemp("fuzz"))


@pytest.mark.parametrize("case", [_param(c) for c in QUICK])
def test_fuzz_case(case: Case, quick_results: dict[str, dict]) -> None:
    assert problems(quick_results[case.id]) == []


TABLES = table_cases(SEED)
FASTVIDEO = "fastvideo_training_mfu_h100x2_before.sqlite"  # thousands of ranges and calls


@pytest.fixture(scope="module")
def table_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return run_cases(TABLES, tmp_path_factory.mktemp("fuzz_tables"))


@pytest.mark.parametrize("case", [_param(c) for c in TABLES])
def test_fuzz_nvtx_and_runtime_case(case: Case, table_results: dict[str, dict]) -> None:
    """A clean run conserving every device's time as plain SQL sums it, or one line with a
    documented exit code (never 11)."""
    assert problems(table_results[case.id]) == []


@pytest.mark.parametrize("kind", ["nvtx_swapped", "runtime_swapped"])
def test_swapped_spans_of_a_real_export_are_refused(kind: str, table_results: dict) -> None:
    """Thousands of ranges or calls ending before they start: exit 4, naming how many."""
    found = [c for c in TABLES if c.base.endswith(FASTVIDEO) and c.mutation == kind]
    if not found:
        pytest.skip(f"{FASTVIDEO} is not in the corpus")
    result = table_results[found[0].id]
    assert result["code"] == 4, result["stderr"]
    assert "end before they start" in result["stderr"]


def test_fuzz_set_covers_every_mutation() -> None:
    """The quick set is not all one kind: each misuse, and most mutations of each input kind."""
    kinds = Counter((c.is_trace, c.mutation) for c in QUICK)
    assert len(kinds) >= 25, kinds


@pytest.mark.slow
@pytest.mark.skipif(
    "NSYSMAP_FUZZ_CASES" not in os.environ,
    reason="the larger fuzz run: set NSYSMAP_FUZZ_CASES (docs/cli.md, Fuzzing)",
)
def test_fuzz_larger_run(tmp_path: pytest.TempPathFactory) -> None:
    """NSYSMAP_FUZZ_CASES cases (1,600 documented) of another seed over every corpus file,
    and every NVTX and runtime mutation of that seed over every export with both tables."""
    count = int(os.environ["NSYSMAP_FUZZ_CASES"])
    seed = int(os.environ.get("NSYSMAP_FUZZ_SEED", str(SEED + 1)))
    selected = cases(seed, count, every_file=True) + table_cases(seed, every_file=True)
    results = run_cases(selected, tmp_path)
    codes = Counter(r["code"] for r in results.values())
    slowest = max(r.get("seconds") or 0.0 for r in results.values())
    failed = {case.id: found for case in selected if (found := problems(results[case.id]))}
    exits = dict(sorted(codes.items(), key=str))
    print(f"\nfuzz seed {seed}: {len(selected)} cases, exit codes {exits}")
    print(f"slowest case {slowest:.1f} s; {len(failed)} cases with problems")
    for case_id, found in list(failed.items())[:40]:
        print(f"FAILED {case_id}: {found[0][:300]}")
    assert failed == {}
