"""Ctrl-C wherever it lands: one line, exit 130, the earlier outputs intact.

`nsysmap attribute` (its console script, nsysmap.console) gets SIGINT, as a
terminal's Ctrl-C sends it, during its start-up imports, before each kind
of step of writing its outputs (tests/fault_points.py), at the end of the
command once its outputs are in place, and while the interpreter ends. Every
time: one line on stderr, exit 130, no traceback, the folder's outputs
complete (the old ones, or the new ones when the line says so), the user's
files there and no staging folder left. docs/cli.md ("Ctrl-C") names this
test.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from tests.test_output_kills import HELPER, ROOT, World, _tree
from tests.test_output_swap import _staging_left

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("interrupts"))


def _interrupted(world: World, name: str, step: int, **env: str) -> tuple[str, str, str]:
    """Run `nsysmap attribute B -o DIR` with SIGINT at `step` (and `env`'s hooks); the
    state DIR is left in, and the run's stdout and stderr, once checked."""
    work = world.fresh(name)
    argv = ["attribute", str(world.b), "-o", str(work / "out")]
    cmd = [sys.executable, str(HELPER), str(work), str(step), "INT", f"{work}.log", "--", *argv]
    done = subprocess.run(
        cmd,
        cwd=ROOT,
        env=_env(env),
        capture_output=True,
        text=True,
        timeout=300,
        # SIGINT as an interactive shell leaves it: a test run started as a background
        # job (a CI runner's) hands its children SIGINT ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 130, done.stderr
    assert len(lines) == 1 and lines[0].startswith("nsysmap: interrupted"), done.stderr
    state = world.generation(work / "out")
    assert _tree(work / "out") == world.user and _staging_left(work) == []
    complete = lines[0].endswith(f"the outputs in {work / 'out'} are complete")
    assert complete == (state == "new"), (state, lines[0])
    return state, done.stdout, lines[0]


def _env(extra: dict[str, str]) -> dict[str, str]:
    import os

    return {**os.environ, **extra}


def test_ctrl_c_during_the_start_up_imports(world):
    state, stdout, line = _interrupted(world, "import", -1, FAULT_IMPORT="polars")
    assert state == "old" and line == "nsysmap: interrupted" and stdout == ""


def test_ctrl_c_before_each_kind_of_step_of_writing(world):
    """The first step of each kind before the swap and after it (the swap itself
    takes a Ctrl-C once it is done)."""
    work = world.fresh("count")
    proc = world.run(work, -1)
    assert proc.wait(timeout=300) == 0
    log = (work.parent / f"{work.name}.log").read_text().splitlines()
    swapped = max(i for i, line in enumerate(log) if line.split()[1] == "renameat2")
    firsts: dict[tuple[bool, str], int] = {}
    for i, line in enumerate(log):
        firsts.setdefault((i > swapped, line.split()[1]), i)
    states = {step: _interrupted(world, f"int-{step}", step)[0] for step in sorted(firsts.values())}
    assert set(states.values()) == {"old", "new"}


def test_ctrl_c_while_the_interpreter_ends(world):
    state, stdout, line = _interrupted(world, "exit", -1, FAULT_AT_EXIT="1")
    tables = json.loads((world.root / "exit" / "out" / "manifest.json").read_text())["tables"]
    assert state == "new" and f"Wrote {len(tables)} tables and manifest.json" in stdout
    assert line.endswith("are complete")


def test_ctrl_c_while_the_interpreter_ends_under_python_m_nsysmap_cli(world):
    """`python -m nsysmap.cli`, the command without its console script, answers Ctrl-C
    as the console script does."""
    env = {"FAULT_AT_EXIT": "1", "FAULT_RUN_MODULE": "nsysmap.cli"}
    state, stdout, line = _interrupted(world, "exit-m", -1, **env)
    assert state == "new" and "manifest.json" in stdout and line.endswith("are complete")
