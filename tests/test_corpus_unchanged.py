"""Every output table of every real profile, as the code of BASELINE wrote it.

A change to how nsysmap is laid out (folders, module names, where a decision
is made) must not change a single value it writes. This test exports the
commit BASELINE into a temporary folder (`git archive`), runs `nsysmap
attribute` of that tree and of this one on every file of
../shared/corpus/{nsys,real,real2,real3}, and compares the exit codes, the
error lines, the files written, every Parquet table (values, types, order)
and the manifest; then `nsysmap report --html` and `nsysmap diff --html` of
each output (the report's Markdown, answers.json, its tables and HTML page,
the diff's page: each the same but for the output folder's name, which
they quote). The nsys exports are attributed a second time read apart
(`--memory-gb` below any export, `NSYSMAP_WINDOWS=3`): by process where they
hold several processes with GPU work, else in time windows.

Move BASELINE forward when a change means to alter the outputs. Skips, saying
why, where git, the commit or the corpus is absent.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

pytestmark = [pytest.mark.slow, pytest.mark.corpus]

# The last commit whose outputs a later change means to keep: every change since
# (speed, layout) must leave every table, report and page as it wrote them. Moved
# with the devices a measured region leaves out (answers.json 2.3; after the waits
# of a profile without steps over its measured region, the HTML page's names as
# code, the softmax wording, the pass starts that no host gap marks and
# findings.parquet, output schema 1.11; then the HTML page's time-by-phase caption
# naming the measured steps the header counts; then output schema 1.12 in every
# manifest; then the read apart of a multi-process export that was to be read in
# time windows too, saying why it was not, process by process: windows_refused in
# its manifest; then the findings of a profile without steps said over the measured
# time, not per step: findings.parquet's per_step, output schema 1.13; then those
# about no one phase about all the measured work, not the whole step; then the
# findings of a profile without step ranges whose structure finds steps, per step;
# then `nsysmap diff` per step of each run's structure, its page saying what a step is;
# then the step's top kernel in the brief saying its calls per step; then the titles of
# host_sync and sync_copy without a measured step; then the diff page's range names
# without their marks; then host_sync's fix without a measured step; then the waits'
# launch-bound time in gaps over 0.25 ms, told apart: answers.json's long_launch_ns; then
# work launched before the capture found over its whole process and the copies' regions
# named, fixes that hold for the profile in hand, the compute stream's idle time under
# exposed communication claimed once, the note on a profile without passes, what to fix
# first's header, and passes of no operation not counted; then the inferred blocks' shares
# said of the device's time, the CPU backend's as CPU time, and a scope's evidence from its
# counted passes only; then shares without a step "of the measured wall time" and the
# all-to-all fix for any model; then layers of two kinds in turn as one stack of blocks,
# short names of mangled kernel symbols, the time a region's steps or passes hold
# (answers.json 2.4), gaps longer than the GPU's latency as unknown, the overlap of
# pipelined steps' windows, cut names that read alike told apart, and the number of
# kernels a short name stands for; then a weak inference's confidence said beside the
# repeat it measures; then that repeat named a sequence of operations, not passes).
BASELINE = "1de21b817a96fc9994733802344fa02dfb306bd2"
ROOT = Path(__file__).resolve().parents[1]
CORPUS = (ROOT / ".." / "shared" / "corpus").resolve()
FOLDERS = ("nsys", "real", "real2", "real3")
SUFFIXES = (".sqlite", ".json", ".json.gz")
# Read apart: a budget below any export, and three windows where one process holds the work.
APART = (["--memory-gb", "0.000001"], {"NSYSMAP_WINDOWS": "3"})
# Manifest entries that say where and when, not what.
VOLATILE = ("input",)
DIFF_PAGE = "diff.html"
# The files of `nsysmap report` and `nsysmap diff` compared as text (the output
# folder's name, which they quote, aside).
TEXTS = ("report.md", "answers.json", "report.html", DIFF_PAGE)


def corpus_files() -> list[Path]:
    found = []
    for folder in FOLDERS:
        for path in sorted((CORPUS / folder).glob("*")):
            if path.name != "catalogue.json" and path.name.endswith(SUFFIXES):
                found.append(path)
    return found


def _cases() -> list[tuple[str, bool]]:
    files = corpus_files()
    cases = [(f"{p.parent.name}/{p.name}", False) for p in files]
    cases += [(f"{p.parent.name}/{p.name}", True) for p in files if p.suffix == ".sqlite"]
    return cases or [("<corpus absent>", False)]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tree of BASELINE, exported into a temporary folder."""
    if not corpus_files():
        pytest.skip(f"the corpus is not at {CORPUS}")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", BASELINE, "nsysmap", "instrument"],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        pytest.skip(f"commit {BASELINE[:10]} is not in this checkout: {archive.stderr[-200:]!r}")
    tree = tmp_path_factory.mktemp("baseline")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    where = _python(tree, ["-c", "import nsysmap; print(nsysmap.__file__)"], {})
    assert Path(where.stdout.strip()).is_relative_to(tree), where.stdout + where.stderr
    return tree


def _python(tree: Path, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`python ARGV` with `tree`'s nsysmap first on the path."""
    environ = {**os.environ, "PYTHONPATH": str(tree), "NSYSMAP_WINDOWS": "", **env}
    return subprocess.run(
        [sys.executable, *argv], cwd=tree, env=environ, capture_output=True, text=True, timeout=900
    )


def _attributed(tree: Path, profile: Path, out: Path, apart: bool) -> tuple[int, str]:
    """`nsysmap attribute` of `tree` into `out`, then (where it succeeded, and for the
    whole read) `nsysmap report --html` and `nsysmap diff --html` of that output."""
    options, env = APART if apart else ([], {})
    argv = ["-m", "nsysmap.cli", "attribute", str(profile), "-o", str(out), "--quiet", *options]
    done = _python(tree, argv, env)
    errors = done.stderr
    if done.returncode == 0 and not apart:
        report = _python(tree, ["-m", "nsysmap.cli", "report", str(out), "--html", "--quiet"], {})
        diff = [str(out), str(out), "--html", str(out / DIFF_PAGE)]
        diffed = _python(tree, ["-m", "nsysmap.cli", "diff", *diff], {})
        errors += f"report: {report.returncode} {report.stderr}"
        errors += f"diff: {diffed.returncode} {diffed.stderr}"
    return done.returncode, errors.replace(str(out), "OUT")


@pytest.fixture(scope="module")
def runs(baseline: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """(case, apart) -> the two runs: (exit code, stderr, output folder) of BASELINE, then now."""
    done: dict = {}
    with ThreadPoolExecutor(2) as pool:

        def run(case: str, apart: bool) -> tuple:
            if (case, apart) not in done:
                profile = CORPUS / case
                outs = [tmp_path_factory.mktemp("out") / "o" for _ in range(2)]
                both = pool.map(
                    lambda tree, out: (*_attributed(tree, profile, out, apart), out),
                    (baseline, ROOT),
                    outs,
                )
                done[(case, apart)] = tuple(both)
            return done[(case, apart)]

        yield run


def _manifest(out: Path) -> dict:
    manifest = json.loads((out / "manifest.json").read_text())
    return {key: value for key, value in manifest.items() if key not in VOLATILE}


def tables_differ(before: Path, after: Path) -> list[str]:
    """What differs between two output folders: their files, tables and manifests."""
    names = sorted(p.name for p in before.iterdir()), sorted(p.name for p in after.iterdir())
    if names[0] != names[1]:
        return [f"files: {names[0]} != {names[1]}"]
    found = []
    for name in names[0]:
        if name.endswith(".parquet"):
            try:
                assert_frame_equal(
                    pl.read_parquet(before / name), pl.read_parquet(after / name), check_exact=True
                )
            except AssertionError as exc:
                found.append(f"{name}: {str(exc).splitlines()[0]}")
    if (before / "manifest.json").is_file() and _manifest(before) != _manifest(after):
        found.append("manifest.json")
    for name in TEXTS:
        if (before / name).is_file():
            texts = [(d / name).read_text().replace(str(d), "OUT") for d in (before, after)]
            if texts[0] != texts[1]:
                found.append(name)
    return found


def test_tables_differ_sees_one_changed_value(tmp_path: Path):
    for side, value in (("a", 1), ("b", 2)):
        (tmp_path / side).mkdir()
        pl.DataFrame({"x": [0, value]}).write_parquet(tmp_path / side / "t.parquet")
    assert tables_differ(tmp_path / "a", tmp_path / "a") == []
    assert [d.split(":")[0] for d in tables_differ(tmp_path / "a", tmp_path / "b")] == ["t.parquet"]
    (tmp_path / "b" / "u.parquet").write_bytes(b"")
    assert tables_differ(tmp_path / "a", tmp_path / "b")[0].startswith("files:")


@pytest.mark.parametrize(("case", "apart"), _cases())
def test_every_table_is_as_the_baseline_wrote_it(case: str, apart: bool, runs):
    (code_before, err_before, before), (code_after, err_after, after) = runs(case, apart)
    assert (code_after, err_after) == (code_before, err_before)
    if code_before == 0:
        assert tables_differ(before, after) == []
