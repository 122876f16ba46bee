"""The launcher contract: `python -m instrument.launch ... SCRIPT [ARGS...]`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import instrument
from instrument import launch

pytestmark = pytest.mark.slow  # launcher runs in child processes

# A small training script; argv: steps [crash_at] [how: raise|interrupt|exit]
SCRIPT = """
import json, sys
import torch
from torch.utils.data import DataLoader, TensorDataset

steps = int(sys.argv[1])
crash_at = int(sys.argv[2]) if len(sys.argv) > 2 else -1
how = sys.argv[3] if len(sys.argv) > 3 else "raise"
with open(sys.argv[0] + ".seen.json", "w") as f:
    json.dump({"argv": sys.argv, "path0": sys.path[0], "name": __name__}, f)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(2 * steps, 4), torch.randn(2 * steps, 1))
for i, (x, y) in enumerate(DataLoader(data, batch_size=2)):
    if i == crash_at:
        if how == "interrupt":
            raise KeyboardInterrupt
        if how == "exit":
            sys.exit(3)
        if how == "term":
            import os, signal
            os.kill(os.getpid(), signal.SIGTERM)
        raise ValueError("planned failure\\nafter two steps")
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "scripts" / "train_tiny.py"
    path.parent.mkdir()
    path.write_text(SCRIPT)
    return path


@pytest.fixture(autouse=True)
def no_session_left():
    yield
    assert instrument.active() is None


def run_inprocess(out: Path, script: Path, *args: str, backend: str = "torch", opts=()) -> dict:
    argv = ["--backend", backend, "--out", str(out), *opts, str(script), *args]
    status = launch.main(argv)
    record = json.loads((out / "launch.json").read_text())
    assert record["exit_status"] == status
    return record


def trace_names(out: Path) -> list[tuple[str, str | None, object]]:
    events = json.loads((out / "trace.json").read_text())["traceEvents"]
    return [
        (e["name"], e.get("cat"), e.get("tid")) for e in events if "nsysmap:" in e.get("name", "")
    ]


def test_torch_backend_profiles_the_window_and_writes_both_files(tmp_path, script):
    out = tmp_path / "out"
    record = run_inprocess(out, script, "6", "-1", "none", "--steps", "99")
    assert record["backend"] == "torch"
    assert record["script"] == str(script)
    assert record["argv"] == [str(script), "6", "-1", "none", "--steps", "99"]
    assert (record["exit_status"], record["exception"], record["interrupted"]) == (0, None, False)
    assert record["steps_seen"] == 6
    assert record["profiled_steps"] == [1, 3]
    assert record["trace"] == "trace.json"
    assert record["torch_version"] == torch.__version__
    assert record["cuda_device"] is None or torch.cuda.is_available()
    assert record["wall_s"] > 0
    seen = json.loads(Path(str(script) + ".seen.json").read_text())
    assert seen == {"argv": record["argv"], "path0": str(script.parent),
                    "name": "__main__"}  # fmt: skip
    names = trace_names(out)
    steps = sorted({n for n, _, _ in names if n.startswith("nsysmap:step:")})
    assert steps == ["nsysmap:step:1", "nsysmap:step:2", "nsysmap:step:3"]
    assert all(cat == "user_annotation" for _, cat, _ in names)
    assert sum(n == "nsysmap:fwd:Linear:0" for n, _, _ in names) == 3
    assert sum(n == "nsysmap:bwd:Linear:2" for n, _, _ in names) == 3


def test_crashing_script_still_writes_both_files_and_exits_1(tmp_path, script):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "instrument.launch", "--backend", "torch", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(Path(launch.__file__).parents[1])}
    done = subprocess.run([*cmd, str(script), "5", "2"], capture_output=True, text=True, env=env)
    assert done.returncode == 1, done.stderr
    record = json.loads((out / "launch.json").read_text())
    assert record["exit_status"] == 1
    assert record["exception"] == "ValueError: planned failure after two steps"
    assert record["interrupted"] is False
    assert record["steps_seen"] == 2
    assert record["profiled_steps"] == [1, 1]
    assert record["trace"] == "trace.json" and (out / "trace.json").stat().st_size > 0
    assert "nsysmap:step:1" in {n for n, _, _ in trace_names(out)}
    # The traceback reads as `python SCRIPT` would print it: from the script's frame.
    assert "Traceback (most recent call last):" in done.stderr
    assert f'File "{script}", line' in done.stderr
    assert "ValueError: planned failure" in done.stderr
    assert "runpy" not in done.stderr and "launch.py" not in done.stderr


def test_keyboard_interrupt_exits_130(tmp_path, script, capsys):
    record = run_inprocess(tmp_path / "out", script, "5", "2", "interrupt")
    assert record["exit_status"] == 130
    assert record["interrupted"] is True
    assert record["exception"] == "KeyboardInterrupt"
    assert record["steps_seen"] == 2
    assert "KeyboardInterrupt" in capsys.readouterr().err


def test_sigterm_is_reported_as_an_interruption(tmp_path, script):
    import signal

    before = signal.getsignal(signal.SIGTERM)
    record = run_inprocess(tmp_path / "out", script, "5", "1", "term", backend="off")
    assert (record["exit_status"], record["interrupted"]) == (143, True)
    assert record["exception"] == "Terminated: SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before


def test_system_exit_code_passes_through(tmp_path, script):
    record = run_inprocess(tmp_path / "out", script, "5", "1", "exit", backend="off")
    assert (record["exit_status"], record["exception"]) == (3, "SystemExit: 3")
    assert record["interrupted"] is False


def test_short_script_profiles_what_there_is_and_says_so(tmp_path, script, capsys):
    record = run_inprocess(tmp_path / "out", script, "2")
    assert record["steps_seen"] == 2
    assert record["profiled_steps"] == [1, 1]
    assert any("fewer than the window 1..3" in note for note in record["notes"])
    assert "fewer than the window" in capsys.readouterr().err


def test_steps_zero_profiles_until_the_script_ends(tmp_path, script):
    opts = ("--warmup-steps", "2", "--steps", "0", "--no-record-shapes")
    record = run_inprocess(tmp_path / "out", script, "5", opts=opts)
    assert record["profiled_steps"] == [2, 4]
    steps = {n for n, _, _ in trace_names(tmp_path / "out") if n.startswith("nsysmap:step:")}
    assert {"nsysmap:step:2", "nsysmap:step:4"} <= steps and "nsysmap:step:1" not in steps


def test_off_and_nsys_backends_write_no_trace(tmp_path, script):
    off = run_inprocess(tmp_path / "off", script, "4", backend="off")
    assert (off["trace"], off["profiled_steps"], off["steps_seen"]) == (None, None, 4)
    nsys = run_inprocess(tmp_path / "nsys", script, "4", backend="nsys")
    assert (nsys["trace"], nsys["profiled_steps"], nsys["exit_status"]) == (None, [1, 3], 0)
    if not torch.cuda.is_available():
        assert any("cudaProfilerStart was not called" in note for note in nsys["notes"])
    assert not (tmp_path / "off" / "trace.json").exists()


def test_parse_leaves_the_script_arguments_alone():
    opts, script, args = launch.parse(
        ["--backend=off", "--out", "d", "--no-record-shapes", "s.py", "--steps", "9", "--out", "x"]
    )
    assert (opts.backend, str(opts.out), opts.steps, opts.no_record_shapes) == ("off", "d", 3, True)
    assert (script, args) == ("s.py", ["--steps", "9", "--out", "x"])
    opts, script, args = launch.parse(["--backend", "nsys", "--out", "d", "--", "-weird.py", "a"])
    assert (opts.warmup_steps, script, args) == (1, "-weird.py", ["a"])
    with pytest.raises(SystemExit):
        launch.parse(["--backend", "torch", "--out", "d"])
