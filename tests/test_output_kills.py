"""`nsysmap attribute` killed at every step of replacing an output folder, and read meanwhile.

The folder holds a complete earlier output (step 0) and the user's files; a
run writing new outputs (step 7) into it is killed with SIGKILL before each
of its file-system steps in turn (tests/fault_points.py counts them: the
staging folder made and marked, the user's entries linked, the swap, the
old folder settled), with the swap itself (RENAME_EXCHANGE) and with its
fallback (two renames). After every kill a reader of the folder sees the
complete old outputs or the complete new ones (through manifest.json as
`read_outputs` reads, and file by file), every file of the user's is there,
and the next run leaves no staging folder behind. A reader polling the
folder while runs with slowed steps are killed at random moments sees the
same. docs/outputs.md ("Replacing the outputs") names this test.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pytest

from nsysmap.output.swap import MARK
from nsysmap.output.writer import read_outputs
from tests.cli_runner import nsysmap_cli
from tests.test_output_swap import _export, _staging_left, _tree, _user_files

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
HELPER = ROOT / "tests" / "fault_points.py"


class World:
    """The inputs, the outputs each gives, and a folder holding the old one and the user's files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.a, self.b = _export(root / "a.sqlite", 0), _export(root / "b.sqlite", 7)
        self.expected = {
            "old": self._outputs(self.a, "ref_a"),
            "new": self._outputs(self.b, "ref_b"),
        }
        self.template = root / "template"
        assert nsysmap_cli(["attribute", self.a, "-o", self.template / "out", "--quiet"]) == 0
        self.user = _user_files(self.template / "out")

    def _outputs(self, source: Path, name: str) -> dict[str, pl.DataFrame]:
        assert nsysmap_cli(["attribute", source, "-o", self.root / name, "--quiet"]) == 0
        return read_outputs(self.root / name)

    def fresh(self, name: str) -> Path:
        work = self.root / name
        shutil.copytree(self.template, work, symlinks=True)
        return work

    def generation(self, out: Path, *, missing_ok: bool = False) -> str:
        """'old' or 'new': which complete set `out` holds, read through its manifest as
        read_outputs reads, and file by file as the folder is at one instant ('missing'
        when there is no folder and `missing_ok`)."""
        if missing_ok and not out.exists():
            return "missing"
        through_manifest = self._which(read_outputs(out))
        self._which(_files_at_once(out))
        return through_manifest

    def _which(self, tables: dict[str, pl.DataFrame]) -> str:
        for name, expected in self.expected.items():
            if tables.keys() == expected.keys() and all(
                tables[t].equals(expected[t]) for t in expected
            ):
                return name
        raise AssertionError(f"a mix: {sorted(tables)}")

    def run(
        self, work: Path, step: int, *, no_exchange: bool = False, delay: float = 0
    ) -> subprocess.Popen[str]:
        env = {**os.environ, "FAULT_NO_EXCHANGE": "1" if no_exchange else "0"}
        argv = ["attribute", str(self.b), "-o", str(work / "out"), "--quiet"]
        log = str(work) + ".log"
        cmd = [
            sys.executable,
            str(HELPER),
            str(work),
            str(step),
            "KILL",
            log,
            str(delay),
            "--",
            *argv,
        ]
        return subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("kills"))


def _kill_points(world: World, no_exchange: bool) -> list[int]:
    """The steps of a whole run (counted by tests/fault_points.py) to kill it at: every
    one, but of a row of steps of one kind (the old outputs unlinked one by one) only
    its first and last."""
    work = world.fresh(f"count-{no_exchange}")
    proc = world.run(work, -1, no_exchange=no_exchange)
    assert proc.wait(timeout=120) == 0, proc.communicate()[1]
    assert world.generation(work / "out") == "new"
    kinds = [line.split()[1] for line in Path(str(work) + ".log").read_text().splitlines()]
    return [
        i
        for i, kind in enumerate(kinds)
        if not 0 < i < len(kinds) - 1 or not kinds[i - 1] == kind == kinds[i + 1]
    ]


def _killed_at(world: World, step: int, no_exchange: bool) -> tuple[int, str]:
    """Kill a run at `step`; the state a reader then sees, checked, and after the next run."""
    work = world.fresh(f"kill-{no_exchange}-{step}")
    proc = world.run(work, step, no_exchange=no_exchange)
    assert proc.wait(timeout=300) == -signal.SIGKILL, proc.communicate()[1]
    state = world.generation(work / "out", missing_ok=no_exchange)
    if state != "missing":
        assert _tree(work / "out") == world.user, f"step {step}"
    _after_the_next_run(world, work)
    return step, state


_IN_PROCESS = threading.Lock()  # click's test runner swaps sys.stdout: one at a time


def _after_the_next_run(world: World, work: Path) -> None:
    out = work / "out"
    with _IN_PROCESS:
        assert nsysmap_cli(["attribute", world.b, "-o", out, "--quiet"]) == 0
    assert world.generation(out) == "new" and _tree(out) == world.user
    assert _staging_left(work) == [] and not (out / MARK).exists()


@pytest.mark.parametrize("no_exchange", [False, True], ids=["exchange", "two_renames"])
def test_a_kill_at_every_step_leaves_old_or_new_outputs_and_every_user_file(world, no_exchange):
    points = _kill_points(world, no_exchange)
    assert len(points) >= 15  # made, marked, linked, swapped, settled
    with ThreadPoolExecutor(2) as pool:  # the runs are processes: two at a time
        states = dict(pool.map(lambda step: _killed_at(world, step, no_exchange), points))
    assert {"old", "new"} <= set(states.values())  # killed before and after the swap
    assert states[points[0]] == "old" and states[points[-1]] == "new"


def test_a_reader_during_slowed_runs_killed_at_random_moments(world):
    """A reader polls the folder while a run whose every step takes 20 ms more is
    killed at a random moment: each read is the old set or the new one."""
    rng = random.Random(32)
    for attempt in range(6):
        work = world.fresh(f"random-{attempt}")
        reads: list[tuple[str, bool]] = []
        stop = threading.Event()
        reader = threading.Thread(target=_poll, args=(world, work / "out", reads, stop))
        proc = world.run(work, -1, delay=0.02)
        reader.start()
        time.sleep(rng.uniform(0.5, 4.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=120)
        stop.set()
        reader.join()
        assert reads and {state for state, _ in reads} <= {"old", "new"}, reads
        assert all(user for _, user in reads)
        _after_the_next_run(world, work)


def _poll(world: World, out: Path, reads: list[tuple[str, bool]], stop: threading.Event) -> None:
    """Read `out` again and again until `stop`: which set, and are the user's files there."""
    while not stop.is_set():
        try:
            reads.append((world.generation(out), _tree(out) == world.user))
        except Exception as exc:
            reads.append((f"{type(exc).__name__}: {exc}", False))


def _files_at_once(out: Path) -> dict[str, pl.DataFrame]:
    """Every `*.parquet` of the folder `out` is at one instant: read through one
    descriptor of it, and read again when the path no longer names that folder at the
    end (a swap came between: what was read is the old folder, being emptied)."""
    for _ in range(20):
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
        try:
            names = [n for n in os.listdir(fd) if n.endswith(".parquet")]
            tables = {n.removesuffix(".parquet"): _read_at(fd, n) for n in names}
            if os.path.samestat(os.fstat(fd), os.stat(out)):
                return tables
        except FileNotFoundError:
            continue
        finally:
            os.close(fd)
    raise AssertionError(f"{out}: never read whole")


def _read_at(folder_fd: int, name: str) -> pl.DataFrame:
    with os.fdopen(os.open(name, os.O_RDONLY, dir_fd=folder_fd), "rb") as fh:
        return pl.read_parquet(fh)
