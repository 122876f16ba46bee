"""The nsys path of a distributed `nsysmap run`, against the stand-in nsys (tests/fake_nsys).

The commands nsysmap runs for each launch form are checked argument for
argument: one `nsys profile` per rank with `%q{RANK}` in the output name
(`--nproc-per-node`, and under torchrun), or one around torchrun for the
whole job (`--one-nsys-report`), or one around a script that spawns its ranks;
then one `nsys export` per report. The stand-in really runs torchrun, the
rank guards and the launcher, writes a placeholder report that keeps the
RANK it ran under, and exports a synthetic SQLite file per rank (a slow rank
1) or, for one report, an export of two processes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from devtools.synth import SynthExport
from devtools.synth.ddp_ranks import Job, write_rank_exports
from nsysmap.many.rank_collectives import rank_collectives
from tests import fake_nsys
from tests.cli_runner import invoke

pytestmark = [pytest.mark.slow, pytest.mark.torch]  # torchrun and the launcher, several times

RANKS_SCRIPT = """\
import sys
import torch.multiprocessing as mp


def rank(index):
    print(f"spawned rank {index}")


if __name__ == "__main__":
    if "--spawn" in sys.argv:
        mp.spawn(rank, nprocs=2)
"""


def two_process_export(path: Path) -> Path:
    """One export of a two-rank job: processes 100 and 200, on GPUs 0 and 1, two steps each."""
    b = SynthExport()
    for pid, device in ((100, 0), (200, 1)):
        b.thread(pid, 1, "python")
        b.gpu(device)
        corr = pid * 10
        for step in (1, 2):
            o = 10.0 * step
            b.range(pid, 1, o, o + 9, f"nsysmap:step:{step}", domain="nsysmap")
            b.range(pid, 1, o, o + 4, "nsysmap:phase:forward", domain="nsysmap")
            b.range(pid, 1, o + 4, o + 8, "nsysmap:phase:backward", domain="nsysmap")
            for start, name in ((o + 1, "ampere_sgemm_128x64_nn"), (o + 5, "ncclKernel_AllReduce")):
                corr += 1
                b.launch(pid, 1, start, start + 0.1, corr)
                b.kernel(pid, device, 7, start + 0.5, start + 2.5, corr, name=name)
    return b.write(path)


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rank0.sqlite, rank1.sqlite (rank 1 slow in transformer.h.1) and job.sqlite."""
    directory = tmp_path_factory.mktemp("exports")
    job = Job(world=2, slow_rank=1, slow_module="transformer.h.1", module_factor=3.0, n_layer=2)
    for rank, path in enumerate(write_rank_exports(directory / "made", job, 300)):
        shutil.copyfile(path, directory / f"rank{rank}.sqlite")
    two_process_export(directory / "job.sqlite")
    return directory


def run_with_nsys(base: Path, exports: Path, form: str, export: str) -> dict[str, Any]:
    """One launch form with the stand-in nsys first on PATH; what it ran and wrote."""
    script, out, log = base / "ranks.py", base / "out", base / "nsys.log"
    script.write_text(RANKS_SCRIPT)
    exe = fake_nsys.install(base / "bin")
    env = {
        **os.environ,
        "PATH": f"{exe.parent}{os.pathsep}{os.path.dirname(sys.executable)}",
        "FAKE_NSYS_LOG": str(log),
        "FAKE_NSYS_EXPORT_FROM": str(exports / export),
    }
    env.pop("NSYS", None)
    run = [sys.executable, "-m", "nsysmap", "run", "--backend", "nsys", "-o", str(out)]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    under = [*torchrun, "--nproc-per-node=2", "-m", "nsysmap", "run", "--backend", "nsys"]
    commands = {
        "nproc": [*run, "--nproc-per-node", "2", str(script)],
        "one-report": [*run, "--nproc-per-node", "2", "--one-nsys-report", str(script)],
        "torchrun": [*under, "-o", str(out), str(script)],
        "spawn": [*run, str(script), "--", "--spawn"],
    }
    done = subprocess.run(commands[form], env=env, capture_output=True, text=True, timeout=600)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return {
        "code": done.returncode,
        "said": f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}",
        "stdout": done.stdout,
        "out": out,
        "exe": str(exe),
        "calls": [c for c in calls if c[1:2] != ["--version"]],
    }


def _option(call: list[str], name: str) -> str:
    return next(a.split("=", 1)[1] for a in call if a.startswith(f"--{name}="))


def _program(call: list[str]) -> list[str]:
    """What `nsys profile` ran: the words after its options."""
    return call[next(i for i, a in enumerate(call) if not a.startswith("-") and i > 1) :]


@pytest.mark.parametrize("form", ["nproc", "torchrun"])
def test_one_nsys_per_rank_with_the_rank_in_the_output_name(
    form: str, exports: Path, tmp_path: Path
) -> None:
    done = run_with_nsys(tmp_path, exports, form, "rank%q{RANK}.sqlite")
    assert done["code"] == 0, done["said"]
    capture = done["out"] / "capture"
    profiles = [c for c in done["calls"] if c[1] == "profile"]
    assert len(profiles) == 2
    for call in profiles:
        assert call[0] == done["exe"]
        assert _option(call, "output") == f"{capture}/rank%q{{RANK}}/report"
        assert _option(call, "capture-range") == "cudaProfilerApi"
        program = _program(call)
        assert program[1:5] == ["-m", "instrument.launch", "--backend", "nsys"]
        assert program[program.index("--out") + 1] == f"{capture}/rank%q{{RANK}}"
    exports_run = sorted(c for c in done["calls"] if c[1] == "export")
    assert [_option(c, "output") for c in exports_run] == [
        f"{capture}/rank{r}/report.sqlite" for r in (0, 1)
    ]
    assert [c[-1] for c in exports_run] == [f"{capture}/rank{r}/report.nsys-rep" for r in (0, 1)]
    ranks = pl.read_parquet(done["out"] / "ranks.parquet")
    assert ranks["rank"].to_list() == [0, 1]
    assert ranks["input"].to_list() == [f"{capture}/rank{r}/report.sqlite" for r in (0, 1)]
    assert "Slowest rank: 1" in done["stdout"] and "transformer.h.1" in done["stdout"]
    run = json.loads((done["out"] / "run.json").read_text())
    assert run["backend"] == "nsys" and run["one_nsys_report"] is False
    # the job's report: exposed communication per collective, for each rank
    code, _, _ = invoke(["report", str(done["out"]), "--quiet"])
    report = (done["out"] / "report.md").read_text()
    assert code == 0 and "### Exposed communication per collective and rank" in report
    assert "| 0 | all_reduce |" in report and "| 1 | all_reduce |" in report
    assert "Straggler cost:" in report and "over steps" in report
    ops = pl.scan_parquet(done["out"] / "ops", hive_partitioning=True)
    per_rank = rank_collectives(ops, [0, 1]).group_by("rank").agg(pl.col("^.*_ns$").sum())
    comm = pl.read_parquet(done["out"] / "rank_comm.parquet").sort("rank")
    assert per_rank.sort("rank")["time_ns"].to_list() == comm["comm_ns"].to_list()
    assert per_rank.sort("rank")["exposed_ns"].to_list() == comm["exposed_ns"].to_list()


def one_profile(done: dict[str, Any]) -> list[str]:
    """The one `nsys profile` of a run that made one report for the whole job."""
    assert done["code"] == 0, done["said"]
    (profile,) = [c for c in done["calls"] if c[1] == "profile"]
    assert _option(profile, "output") == f"{done['out'] / 'capture'}/report"
    return profile


def test_one_nsys_report_for_the_whole_job(exports: Path, tmp_path: Path) -> None:
    done = run_with_nsys(tmp_path, exports, "one-report", "job.sqlite")
    capture = done["out"] / "capture"
    program = _program(one_profile(done))
    assert program[1:3] == ["-m", "torch.distributed.run"]
    inner = program[program.index("--") + 1 :]
    assert inner[1:5] == ["-m", "instrument.launch", "--backend", "nsys"]  # no nsys per rank
    (export,) = [c for c in done["calls"] if c[1] == "export"]
    assert _option(export, "output") == f"{capture}/report.sqlite"
    ranks = pl.read_parquet(done["out"] / "ranks.parquet")
    assert ranks["rank"].to_list() == [0, 1] and ranks["pid"].to_list() == [100, 200]
    assert set(ranks["rank_source"]) == {"process"}
    for rank in (0, 1):  # each rank's launcher still wrote its own record
        launch = json.loads((capture / f"rank{rank}" / "launch.json").read_text())
        assert launch["rank"] == rank and launch["backend"] == "nsys"


def test_a_script_that_spawns_its_ranks_under_one_nsys(exports: Path, tmp_path: Path) -> None:
    done = run_with_nsys(tmp_path, exports, "spawn", "job.sqlite")
    capture = done["out"] / "capture"
    assert _program(one_profile(done))[1:3] == ["-m", "instrument.launch"]
    assert pl.read_parquet(done["out"] / "ranks.parquet")["rank"].to_list() == [0, 1]
    run = json.loads((done["out"] / "run.json").read_text())
    assert run["distributed"] == "torch.multiprocessing.spawn" and run["world_size"] == 2
    for rank in (0, 1):
        record = json.loads((capture / f"rank{rank}" / "rank.json").read_text())
        assert record["launched_by"] == "torch.multiprocessing.spawn"
        assert record["exit_status"] == 0
