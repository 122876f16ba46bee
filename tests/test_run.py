"""`nsysmap run`: backends, command lines, exit statuses, Ctrl-C.

Covers nsysmap.capture.profile_script and nsysmap.cli.run.

Nsight Systems is not installed here: the nsys backend runs against the
stand-in in tests/fake_nsys, whose `export` hands back a synthetic export with
GPT-2-shaped nsysmap ranges whose attribution is worked out by hand below.
The launcher is the real `python -m instrument.launch`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from devtools.synth import SynthExport
from nsysmap.capture import profile_script as run_mod
from nsysmap.core.errors import ExitCode, ScriptFailed
from tests import fake_nsys
from tests.cli_runner import interrupt_when_ready, nsysmap_cli

pytestmark = pytest.mark.slow  # end-to-end runs of scripts under the launcher

MS = 1_000_000
NASTY = ["--lr", "3e-4", "two words", 'it\'s "quoted"', "a; echo no", "$(touch pwned)", "`id`", ""]

ECHO_ARGS = """\
import json, os, sys
with open(os.environ["ARGS_OUT"], "w") as fh:
    json.dump(sys.argv[1:], fh)
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
"""

TINY_TRAIN = """\
import sys, time
from pathlib import Path
import torch

args = sys.argv[1:]
steps = int(args[args.index("--steps") + 1])
crash_at = int(args[args.index("--crash-at") + 1]) if "--crash-at" in args else None
ready = Path(args[args.index("--ready") + 1]) if "--ready" in args else None
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(8, 16), torch.randn(8, 4)
step, started = 0, time.monotonic()
while steps == 0 or step < steps:
    if time.monotonic() - started > 90:  # a bound, should the test driving it fail
        sys.exit(9)
    if step == crash_at:
        sys.exit(3)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    step += 1
    if ready is not None and step == 2:
        ready.write_text("2 steps done")
    if steps == 0:
        time.sleep(0.05)
"""


# ------------------------------------------------------------------ fixtures


def gpt2_like_export(path: Path) -> Path:
    """Two training steps of GPT-2-shaped nsysmap ranges, whole milliseconds.

    Per step (offset 40 ms per step), kernel time by module and direction:
    wte forward 1; c_attn forward 2, backward 2; c_fc forward 3, backward 4;
    outside modules: the data copy 1 (data), the loss kernel 1 (loss), the
    optimizer kernel 3 (optimizer). Backward modules are on the autograd
    thread (tid 2), where no step or phase range is open.
    """
    b = SynthExport()
    b.thread(100, 1, "python")
    b.thread(100, 2, "pt_autograd_0")
    b.gpu(0)
    corr = iter(range(1, 1000))

    def launched(tid: int, at: float, start: float, end: float, name: str) -> None:
        c = next(corr)
        b.launch(100, tid, at, at + 0.1, c)
        b.kernel(100, 0, 7, start, end, c, name=name)

    for step in (0, 1):
        o = 40 * step
        nv = {"domain": "nsysmap"}
        b.range(100, 1, o, o + 40, f"nsysmap:step:{step}", **nv)
        b.range(100, 1, o, o + 2, "nsysmap:phase:data", **nv)
        c = next(corr)
        b.launch(100, 1, o + 1, o + 1.5, c, api="cudaMemcpyAsync_v3020")
        b.memcpy(100, 0, 7, o + 3, o + 4, c)
        b.range(100, 1, o + 2, o + 14, "nsysmap:phase:forward", **nv)
        b.range(100, 1, o + 2, o + 13.5, "nsysmap:fwd:GPT2LMHeadModel:", **nv)
        b.range(100, 1, o + 2.5, o + 13, "nsysmap:fwd:GPT2Model:transformer", **nv)
        b.range(100, 1, o + 3, o + 4, "nsysmap:fwd:Embedding:transformer.wte", **nv)
        launched(1, o + 3.2, o + 5, o + 6, "embedding_kernel")
        b.range(100, 1, o + 4, o + 12, "nsysmap:fwd:GPT2Block:transformer.h.0", **nv)
        b.range(100, 1, o + 5, o + 7, "nsysmap:fwd:Conv1D:transformer.h.0.attn.c_attn", **nv)
        launched(1, o + 6, o + 7, o + 9, "ampere_sgemm_128x64_nn")
        b.range(100, 1, o + 8, o + 10, "nsysmap:fwd:Conv1D:transformer.h.0.mlp.c_fc", **nv)
        launched(1, o + 9, o + 10, o + 13, "ampere_sgemm_128x64_nn")
        b.range(100, 1, o + 14, o + 16, "nsysmap:phase:loss", **nv)
        launched(1, o + 15, o + 16, o + 17, "cross_entropy_kernel")
        b.range(100, 1, o + 16, o + 30, "nsysmap:phase:backward", **nv)
        b.range(100, 2, o + 18, o + 21, "nsysmap:bwd:Conv1D:transformer.h.0.mlp.c_fc", **nv)
        launched(2, o + 19, o + 20, o + 24, "ampere_sgemm_128x64_tn")
        b.range(100, 2, o + 22, o + 25, "nsysmap:bwd:Conv1D:transformer.h.0.attn.c_attn", **nv)
        launched(2, o + 23, o + 25, o + 27, "ampere_sgemm_128x64_tn")
        b.range(100, 1, o + 30, o + 38, "nsysmap:phase:optimizer", **nv)
        launched(1, o + 31, o + 32, o + 35, "multi_tensor_apply_kernel")
    return b.write(path)


@pytest.fixture(scope="module")
def gpt2_sqlite(tmp_path_factory) -> Path:
    return gpt2_like_export(tmp_path_factory.mktemp("synth") / "gpt2.sqlite")


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """A working directory with the test scripts; no nsys on PATH, NSYS unset."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    monkeypatch.setenv("ARGS_OUT", str(tmp_path / "argv.json"))
    (tmp_path / "echo_args.py").write_text(ECHO_ARGS)
    (tmp_path / "tiny_train.py").write_text(TINY_TRAIN)
    return tmp_path


@pytest.fixture
def with_nsys(workdir, gpt2_sqlite, monkeypatch) -> dict[str, Path]:
    """The stand-in nsys first on PATH, exporting the GPT-2-shaped export."""
    exe = fake_nsys.install(workdir / "bin")
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NSYS_LOG", str(workdir / "nsys.log"))
    monkeypatch.setenv("FAKE_NSYS_EXPORT_FROM", str(gpt2_sqlite))
    return {"exe": exe, "log": workdir / "nsys.log", "export": gpt2_sqlite}


def nsysmap(capfd, *argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process (children write to the real stdout and stderr)."""
    code = nsysmap_cli(list(argv))
    out, err = capfd.readouterr()
    return code, out, err


def _calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


# ----------------------------------------------------------- nsys backend


def test_nsys_command_lines_args_and_attributed_outputs(with_nsys, capfd):
    code, out, err = nsysmap(capfd, "run", "-o", "out/g", "echo_args.py", "--", *NASTY)
    assert code == 0, err
    exe = str(with_nsys["exe"])
    version, profile, export = _calls(with_nsys["log"])
    assert version == [exe, "--version"]
    assert profile == [
        exe,
        "profile",
        "--trace=cuda,nvtx,osrt,cublas,cudnn",
        "--sample=none",
        "--cpuctxsw=none",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        "--output=out/g/capture/report",
        "--force-overwrite=true",
        sys.executable,
        "-m",
        "instrument.launch",
        "--backend",
        "nsys",
        "--out",
        "out/g/capture",
        "--",
        "echo_args.py",
        *NASTY,
    ]
    assert export == [
        exe,
        "export",
        "--type=sqlite",
        "--output=out/g/capture/report.sqlite",
        "--force-overwrite=true",
        "out/g/capture/report.nsys-rep",
    ]
    assert _json(Path(os.environ["ARGS_OUT"])) == NASTY
    assert not Path("pwned").exists()
    assert f"Nsight Systems (found {exe})" in out
    run_json = _json(Path("out/g/run.json"))
    assert run_json["command"] == profile
    assert run_json["backend"] == "nsys" and run_json["exit_status"] == 0


def test_nsys_capture_is_attributed_by_module_and_phase(with_nsys, capfd):
    code, _, err = nsysmap(capfd, "run", "--backend", "nsys", "echo_args.py")
    assert code == 0, err
    out = Path("out/echo_args")
    ops = pl.read_parquet(out / "ops.parquet")
    assert ops.height == 16 and ops["dur_ns"].sum() == 34 * MS
    modules = pl.read_parquet(out / "by_module.parquet")
    got = {
        r["module"]: (r["time_ns"], r["forward_ns"], r["backward_ns"])
        for r in modules.iter_rows(named=True)
    }
    assert got["transformer.h.0.mlp.c_fc"] == (14 * MS, 6 * MS, 8 * MS)
    assert got["transformer.h.0.attn.c_attn"] == (8 * MS, 4 * MS, 4 * MS)
    assert got["transformer.wte"] == (2 * MS, 2 * MS, 0)
    phases = dict(pl.read_parquet(out / "by_phase.parquet").select("phase", "time_ns").rows())
    want = {"data": 2, "forward": 12, "loss": 2, "backward": 12, "optimizer": 6}
    assert phases == {k: v * MS for k, v in want.items()}
    steps = ops.group_by("step").agg(pl.col("dur_ns").sum()).sort("step").rows()
    assert steps == [(0, 17 * MS), (1, 17 * MS)]
    manifest = _json(out / "manifest.json")
    assert manifest["options"]["backend"] == "nsys"
    assert manifest["options"]["exit_status"] == 0


def test_failing_script_under_nsys_keeps_outputs_and_its_status(with_nsys, capfd, monkeypatch):
    monkeypatch.setenv("EXIT_WITH", "5")
    code, _, err = nsysmap(capfd, "run", "echo_args.py")
    assert code == 5
    last = err.strip().splitlines()[-1]
    assert last.startswith("nsysmap: error: echo_args.py exited with status 5; outputs for ")
    assert last.endswith(" are in out/echo_args/")
    assert pl.read_parquet("out/echo_args/ops.parquet").height == 16
    assert _json(Path("out/echo_args/manifest.json"))["options"]["exit_status"] == 5


def test_nothing_captured_by_nsys_is_profiler_failed(with_nsys, capfd, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_NO_REPORT", "1")
    code, _, err = nsysmap(capfd, "run", "echo_args.py")
    assert code == ExitCode.PROFILER_FAILED
    last = err.strip().splitlines()[-1]
    assert "nsys captured nothing: no CUDA device was visible to echo_args.py" in last
    assert _json(Path("out/echo_args/run.json"))["capture"] is None


def test_export_failure_is_profiler_failed_with_nsys_message(with_nsys, capfd, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_EXPORT_FAIL", "1")
    code, _, err = nsysmap(capfd, "run", "echo_args.py")
    assert code == ExitCode.PROFILER_FAILED
    assert err.strip().splitlines()[-1].endswith("ERROR: the report file is corrupt")


def test_backend_nsys_without_nsys_is_one_line_exit_6(workdir, capfd):
    code, _, err = nsysmap(capfd, "run", "--backend", "nsys", "echo_args.py", "x")
    assert code == ExitCode.TOOL_MISSING == 6
    assert err.count("\n") == 1 and err.startswith("nsysmap: error: nsys (Nsight Systems)")
    assert not Path(os.environ["ARGS_OUT"]).exists()  # the script never ran


# ---------------------------------------------------------- torch backend


@pytest.mark.slow
def test_torch_backend_end_to_end(workdir, capfd):
    code, out, err = nsysmap(
        capfd, "run", "--warmup-steps", "1", "--steps", "2", "tiny_train.py", "--steps", "4"
    )
    assert code == 0, err
    assert "torch.profiler (nsys not found on PATH)" in out
    out_dir = Path("out/tiny_train")
    ops = pl.read_parquet(out_dir / "ops.parquet")
    assert set(ops["kind"]) == {"cpu_op"}
    assert set(ops["step"].drop_nulls()) == {1, 2}
    modules = set(ops.select("module", "direction").unique().rows())
    assert {("0", "forward"), ("2", "forward"), ("0", "backward"), ("2", "backward")} <= modules
    launch = _json(out_dir / "capture" / "launch.json")
    assert launch["profiled_steps"] == [1, 2] and launch["exit_status"] == 0
    manifest = _json(out_dir / "manifest.json")
    assert manifest["options"]["backend"] == "torch"
    assert manifest["options"]["warmup_steps"] == 1 and manifest["options"]["steps"] == 2


@pytest.mark.slow
def test_crashing_script_keeps_outputs_for_captured_steps(workdir, capfd):
    code, _, err = nsysmap(
        capfd,
        "run",
        "--backend",
        "torch",
        "--warmup-steps",
        "1",
        "--steps",
        "4",
        "tiny_train.py",
        "--steps",
        "6",
        "--crash-at",
        "3",
    )
    assert code == 3
    assert err.strip().splitlines()[-1] == (
        "nsysmap: error: tiny_train.py exited with status 3; "
        "outputs for the 2 captured steps are in out/tiny_train/"
    )
    ops = pl.read_parquet("out/tiny_train/ops.parquet")
    assert set(ops["step"].drop_nulls()) == {1, 2}
    assert _json(Path("out/tiny_train/manifest.json"))["options"]["exit_status"] == 3
    assert _json(Path("out/tiny_train/run.json"))["exit_status"] == 3


@pytest.mark.slow
def test_script_failing_before_capture_exits_with_its_status_and_stale_files_go(
    workdir, capfd, monkeypatch
):
    stale = Path("out/echo_args/capture/trace.json")
    stale.parent.mkdir(parents=True)
    stale.write_text('{"traceEvents": []}')
    monkeypatch.setenv("EXIT_WITH", "2")
    code, _, err = nsysmap(capfd, "run", "--backend", "torch", "echo_args.py")
    assert code == 2  # the script's own status
    last = err.strip().splitlines()[-1]
    assert last == "nsysmap: error: echo_args.py exited with status 2 before anything was captured"
    assert not stale.exists()


@pytest.mark.slow
def test_ctrl_c_is_forwarded_and_the_capture_analysed(workdir):
    ready = workdir / "ready"
    cmd = [sys.executable, "-c", "from nsysmap.cli import main; main()", "run"]
    cmd += ["--backend", "torch", "--warmup-steps", "0", "--steps", "0", "tiny_train.py"]
    cmd += ["--steps", "0", "--ready", str(ready)]
    code, err = interrupt_when_ready(cmd, ready, 60)
    assert code == 130, err
    assert "nsysmap: interrupting" in err
    assert err.strip().splitlines()[-1].startswith("nsysmap: error: tiny_train.py was interrupted")
    ops = pl.read_parquet(workdir / "out/tiny_train/ops.parquet")
    assert ops["step"].drop_nulls().n_unique() >= 2
    assert _json(workdir / "out/tiny_train/run.json")["interrupted"] is True


# ------------------------------------------------------------------ units


def test_missing_script_is_input_not_found(workdir, capfd):
    code, _, err = nsysmap(capfd, "run", "--backend", "torch", "nope.py")
    assert code == ExitCode.INPUT_NOT_FOUND and "nope.py: no such file" in err


def test_launcher_command_passes_arguments_untouched():
    request = run_mod.RunRequest(
        Path("dir with space/train.py"), tuple(NASTY), warmup_steps=2, steps=5, record_shapes=False
    )
    assert run_mod.launcher_command(request, "torch", Path("o/capture")) == [
        sys.executable,
        "-m",
        "instrument.launch",
        "--backend",
        "torch",
        "--out",
        "o/capture",
        "--warmup-steps",
        "2",
        "--steps",
        "5",
        "--no-record-shapes",
        "--",
        "dir with space/train.py",
        *NASTY,
    ]
    plain = run_mod.launcher_command(run_mod.RunRequest(Path("t.py")), "nsys", Path("c"), ["L"])
    assert plain == ["L", "--backend", "nsys", "--out", "c", "--", "t.py"]


def test_script_status_and_step_count():
    assert run_mod.script_status({"exit_status": 3}, 0) == 3
    assert run_mod.script_status({}, 4) == 4
    assert run_mod.script_status({}, -signal.SIGKILL) == 128 + signal.SIGKILL
    assert run_mod.step_count([1, 3]) == 3
    assert run_mod.step_count(None) is None
    assert run_mod.step_count("x") is None


@pytest.mark.parametrize(
    ("status", "interrupted", "steps", "message", "exit_code"),
    [
        (0, False, 3, None, None),
        (3, False, 2, "t.py exited with status 3; outputs for the 2 captured steps are in o/", 3),
        (1, False, 1, "t.py exited with status 1; outputs for the 1 captured step are in o/", 1),
        (300, False, None, "t.py exited with status 300; outputs for what was captured", 8),
        (130, True, 4, "t.py was interrupted; outputs for the 4 captured steps are in o/", 130),
    ],
)
def test_failure_messages_and_exit_codes(status, interrupted, steps, message, exit_code):
    result = run_mod.RunResult(
        Path("t.py"), "torch", "", Path("o"), status, interrupted, steps, analysis=None
    )
    failure = result.failure()
    if message is None:
        assert failure is None
        return
    assert isinstance(failure, ScriptFailed) and str(failure).startswith(message)
    assert failure.process_exit == exit_code


def test_run_passes_the_users_name_rules_to_the_attribution(with_nsys, capfd):
    rule = "warmup=^nsysmap:step:0$"  # the first step is a warm-up here
    code, _, err = nsysmap(capfd, "run", "--phase", rule, "echo_args.py")
    assert code == 0, err
    out = Path("out/echo_args")
    phases = dict(pl.read_parquet(out / "by_phase.parquet").select("phase", "time_ns").rows())
    assert "warmup" not in phases  # a mark beside the phase, not a phase
    ops = pl.read_parquet(out / "ops.parquet")
    assert ops["warmup"].to_list() == (ops["step"] == 0).to_list()
    assert ops.filter("warmup")["dur_ns"].sum() == 17 * MS
    measured = ops.filter(~pl.col("warmup")).group_by("phase").agg(pl.col("dur_ns").sum())
    want = {"data": 1, "forward": 6, "loss": 1, "backward": 6, "optimizer": 3}
    assert dict(measured.rows()) == {k: v * MS for k, v in want.items()}
    assert _json(out / "manifest.json")["options"]["phase_rules"] == [rule]


# ------------------------------------------------ the file flow, as `attribute`


def test_run_streams_a_large_capture_through_the_file_flow(with_nsys, monkeypatch):
    """`nsysmap run` attributes its capture as `nsysmap attribute` does: above
    STREAM_OPS operations the rows are streamed into ops.parquet, never held."""
    from nsysmap.flow import verbs as pipeline
    from nsysmap.output import ops_sinks
    from nsysmap.output.ops_sinks import OpsFile

    monkeypatch.setattr(ops_sinks, "STREAM_OPS", 4)
    result = run_mod.run(run_mod.RunRequest(Path("echo_args.py"), backend="nsys"))
    store = result.analysis.store
    assert isinstance(store, OpsFile) and store.path == Path("out/echo_args/ops.parquet")
    attributed = pipeline.analyse_file(with_nsys["export"], "attributed")
    ops = pl.read_parquet(store.path)
    assert ops.height == store.rows == 16
    assert_frame_equal(ops, attributed.ops)
    assert {"read", "attribute", "write", "hash"} <= set(result.analysis.timings)


def test_run_past_its_memory_budget_reads_the_capture_one_process_at_a_time(
    with_nsys, tmp_path, capfd, monkeypatch
):
    from devtools.synth.bulk import write_export
    from devtools.synth.tile import gpt_tables

    two = write_export(tmp_path / "two.sqlite", gpt_tables(200, seed=3))
    monkeypatch.setenv("FAKE_NSYS_EXPORT_FROM", str(two))
    code, _, err = nsysmap(capfd, "run", "--memory-gb", "1e-6", "-o", "split", "echo_args.py")
    assert code == 0, err
    code, _, err = nsysmap(capfd, "run", "-o", "whole", "echo_args.py")
    assert code == 0, err
    meta = [_json(Path(d) / "manifest.json")["report_meta"] for d in ("split", "whole")]
    assert meta[0]["processes_read_apart"] == "2" and "processes_read_apart" not in meta[1]
    for table in ("by_phase", "by_module", "by_kernel", "by_range"):
        a, b = (pl.read_parquet(Path(d) / f"{table}.parquet") for d in ("split", "whole"))
        assert a.height > 0, table
        assert_frame_equal(a, b, check_exact=False, rel_tol=1e-12)
