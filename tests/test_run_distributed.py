"""`nsysmap run` on a distributed job: each launch form, with two and three gloo ranks on CPU.

    nproc     nsysmap run --nproc-per-node N SCRIPT -- ARGS       (nsysmap starts torchrun)
    torchrun  torchrun --nproc-per-node N -m nsysmap run SCRIPT   (each rank under nsysmap)
    spawn     nsysmap run SCRIPT -- --spawn N                     (the script calls mp.spawn)

Each run trains a tiny DDP model (gloo, CPU) for four steps and profiles
steps 1-2 of every rank with torch.profiler; then the job's outputs are
checked: a rank column holding every rank, steps and phases adding up to each
rank's total, a straggler line, each rank's tables identical to attributing
its capture alone, the same window on every rank, FLOPs counted under DDP.
A rank killed (SIGKILL) mid-run: the others' outputs are written and the exit
status and message name it. Each run starts several torch processes (about
15-25 s here): the runs are module fixtures, shared by the checks. Most attribute
on a Dask cluster of threads in this process (`--scheduler`), which spares
each run the start of worker processes; the two-rank `--nproc-per-node` runs
start their own local cluster, as by default.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from nsysmap.flow.verbs import analyse_file
from tests.cli_runner import interrupt_when_ready, invoke

pytestmark = [pytest.mark.slow, pytest.mark.torch]  # several torch processes per run

TINY_DDP = """\
import datetime, os, signal, socket, sys, time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel


def train(rank, world, steps, die_rank):
    dist.init_process_group(
        "gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60)
    )
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    model = DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(rank)
    for step in range(steps):
        if rank == die_rank and step == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        model(torch.randn(8, 16, generator=data)).pow(2).mean().backward()
        opt.step()
        if READY and rank == 0 and step == 3:
            open(READY, "w").close()
        if READY:
            time.sleep(0.05)
    del model, opt  # then no rank destroys its group while another still uses it
    dist.barrier()
    dist.destroy_process_group()


def option(name, default=None):
    args = sys.argv[1:]
    return int(args[args.index(name) + 1]) if name in args else default


READY = os.environ.get("TINY_DDP_READY")  # a file rank 0 writes after step 3, then slows down


if __name__ == "__main__":
    steps, die_rank, spawn = option("--steps"), option("--die-rank"), option("--spawn")
    if spawn:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        mp.spawn(train, args=(spawn, steps, die_rank), nprocs=spawn)
    else:
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), steps, die_rank)
"""
WINDOW = ["--backend", "torch", "--warmup-steps", "1", "--steps", "2"]
PER_RANK_TABLES = ("by_step", "by_phase", "by_module", "by_kernel", "by_category", "coverage")


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """A Dask scheduler with two worker threads in this process."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",  # reached from the nsysmap processes the tests start
        host="127.0.0.1",
        dashboard_address=None,
    ) as cluster:
        yield cluster.scheduler_address


def launch(
    form: str, world: int, base: Path, scheduler: str | None, *script_args: str
) -> dict[str, Any]:
    """Run one launch form of nsysmap run on the tiny DDP script; what it left."""
    script, out = base / "tiny_ddp.py", base / "out"
    script.write_text(TINY_DDP)
    run = [*WINDOW, "-o", str(out), *(["--scheduler", scheduler] if scheduler else [])]
    args = ["--", "--steps", "4", *script_args]
    nsysmap = [sys.executable, "-m", "nsysmap", "run"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    under = [*torchrun, f"--nproc-per-node={world}", "-m", "nsysmap", "run"]
    commands = {
        "nproc": [*nsysmap, "--nproc-per-node", str(world), *run, str(script), *args],
        "torchrun": [*under, *run, str(script), *args],
        "spawn": [*nsysmap, *run, str(script), *args, "--spawn", str(world)],
    }
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}  # no nsys
    env.pop("NSYS", None)
    done = subprocess.run(
        commands[form], cwd=base, env=env, capture_output=True, text=True, timeout=600
    )
    run_json = out / "run.json"
    return {
        "code": done.returncode,
        "stdout": done.stdout,
        "stderr": done.stderr,
        "out": out,
        "world": world,
        "run": json.loads(run_json.read_text()) if run_json.is_file() else {},
    }


@pytest.fixture(
    scope="module",
    params=[
        ("nproc", 2),
        ("nproc", 3),
        ("torchrun", 2),
        ("torchrun", 3),
        ("spawn", 2),
        ("spawn", 3),
    ],
    ids=lambda p: f"{p[0]}-{p[1]}ranks",
)
def job(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, scheduler: str
) -> dict[str, Any]:
    form, world = request.param
    own_cluster = form == "nproc" and world == 2
    where = None if own_cluster else scheduler
    return launch(form, world, tmp_path_factory.mktemp(f"{form}{world}"), where)


def _said(job: dict[str, Any]) -> str:
    return f"exit {job['code']}\n{job['stdout'][-3000:]}\n{job['stderr'][-3000:]}"


def test_every_rank_is_attributed_and_named(job: dict[str, Any]) -> None:
    assert job["code"] == 0, _said(job)
    out, every = job["out"], list(range(job["world"]))
    assert pl.read_parquet(out / "ranks.parquet")["rank"].to_list() == every
    ops = pl.scan_parquet(out / "ops", hive_partitioning=True)
    assert sorted(ops.select("rank").unique().collect()["rank"].to_list()) == every
    for name in ("by_phase", "rank_comm", "rank_steps"):
        assert sorted(pl.read_parquet(out / f"{name}.parquet")["rank"].unique()) == every, name
    assert job["run"]["world_size"] == job["world"] and job["run"]["failed_ranks"] == []


def test_steps_and_phases_add_up_to_each_ranks_total(job: dict[str, Any]) -> None:
    out = job["out"]
    ops = pl.scan_parquet(out / "ops", hive_partitioning=True)
    total = ops.group_by("rank").agg(pl.col("dur_ns").sum().alias("total")).collect()
    for name in ("by_step", "by_phase"):
        sums = (
            pl.read_parquet(out / f"{name}.parquet")
            .group_by("rank")
            .agg(pl.col("time_ns").sum(), pl.col("time_share").sum())
        )
        joined = sums.join(total, on="rank")
        assert joined.height == job["world"]
        assert (joined["time_ns"] == joined["total"]).all(), name
        assert all(abs(share - 1) < 1e-9 for share in joined["time_share"]), name
    steps = pl.read_parquet(out / "by_step.parquet").filter(pl.col("step").is_not_null())
    assert sorted(steps["step"].unique()) == [1, 2]  # the window, on every rank
    assert steps.group_by("step").agg(pl.col("rank").n_unique())["rank"].min() == job["world"]


def test_a_straggler_line_and_table(job: dict[str, Any]) -> None:
    assert "Straggler cost:" in job["stdout"], _said(job)
    assert "Slowest rank:" in job["stdout"]
    stragglers = pl.read_parquet(job["out"] / "stragglers.parquet")
    assert stragglers.filter(pl.col("step") == 1)["ranks"].to_list() == [job["world"]]


def test_each_ranks_tables_are_those_of_its_capture_alone(
    job: dict[str, Any], tmp_path: Path
) -> None:
    out = job["out"]
    for rank in range(job["world"]):
        trace = out / "capture" / f"rank{rank}" / "trace.json"
        alone = tmp_path / f"rank{rank}"
        analyse_file(trace, alone, infer=False)  # several reports are not inferred either
        for name in PER_RANK_TABLES:
            mine = pl.read_parquet(out / f"{name}.parquet").filter(pl.col("rank") == rank)
            assert_frame_equal(mine.drop("rank"), pl.read_parquet(alone / f"{name}.parquet"))


def test_every_rank_profiled_the_same_window_and_counted_flops(job: dict[str, Any]) -> None:
    for rank in range(job["world"]):
        capture = job["out"] / "capture" / f"rank{rank}"
        launch_json = json.loads((capture / "launch.json").read_text())
        assert launch_json["steps_seen"] == 4 and launch_json["profiled_steps"] == [1, 2]
        assert launch_json["rank"] == rank
        # counted on the module inside DistributedDataParallel, not through the process group
        assert launch_json["flops"] == "flops.json", launch_json["notes"]
        assert json.loads((capture / "flops.json").read_text())["model_class"] == "Sequential"
        record = json.loads((capture / "rank.json").read_text())
        assert (record["rank"], record["world_size"], record["exit_status"]) == (
            rank,
            job["world"],
            0,
        )
    assert job["run"]["window"] is None


def test_one_ranks_whole_report_meets_the_models_flops(job: dict[str, Any]) -> None:
    """`nsysmap report OUT --rank R`: rank R's operations alone, as a one-run report in
    OUT/rankR/, its modules' time meeting the FLOPs of the model counted inside
    DistributedDataParallel (`module.0` in both)."""
    out, rank = job["out"], job["world"] - 1
    code, _, err = invoke(["report", out, "--rank", rank, "--flops", "model", "--quiet"])
    assert code == 0, err
    folder = out / f"rank{rank}"
    phases = pl.read_parquet(folder / "report_module_phase.parquet")
    total = pl.read_parquet(out / "by_phase.parquet").filter(pl.col("rank") == rank)
    assert phases["time_ns"].sum() == total["time_ns"].sum() > 0  # this rank's time, all of it
    linear = phases.filter(pl.col("module").is_in(["module.0", "module.2"]))
    assert set(linear["flop_source"]) == {"model"} and linear["matmul_flop"].sum() > 0
    markdown = (folder / "report.md").read_text()
    assert f"rank {rank}" in markdown.splitlines()[2]  # the Run line names the rank
    assert "## Where the time goes: by phase" in markdown
    code, said, err = invoke(["report", out])  # the cross-rank report points to it
    assert code == 0 and "--rank R" in said, err


def test_a_rank_the_output_does_not_hold_is_refused_in_one_line(job: dict[str, Any]) -> None:
    code, _, err = invoke(["report", job["out"], "--rank", "99"])
    every = ", ".join(str(r) for r in range(job["world"]))
    assert code == 2 and err.strip().endswith(f"holds no rank 99 (its ranks: {every})"), err
    assert len(err.strip().splitlines()) == 1
    assert not (job["out"] / "rank99").exists()


@pytest.fixture(scope="module", params=["nproc", "torchrun", "spawn"])
def killed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, scheduler: str
) -> dict:
    """Three ranks, rank 1 killed with SIGKILL at step 2 (in the profiled window)."""
    form = request.param
    base = tmp_path_factory.mktemp(f"killed-{form}")
    done = launch(form, 3, base, scheduler, "--die-rank", "1")
    return {**done, "form": form}


def test_a_killed_rank_is_named_and_the_others_are_written(killed: dict[str, Any]) -> None:
    out = killed["out"]
    # nsysmap exits with the status of the rank that failed first; torchrun with 1.
    assert killed["code"] == (1 if killed["form"] == "torchrun" else 137), _said(killed)
    assert "rank 1 of 3 was killed by SIGKILL (status 137)" in killed["stderr"], _said(killed)
    ranks = pl.read_parquet(out / "ranks.parquet")["rank"].to_list()
    assert ranks == [0, 2]
    phases = pl.read_parquet(out / "by_phase.parquet")
    assert sorted(phases["rank"].unique()) == [0, 2]
    run = killed["run"]
    assert run["failed_ranks"][:1] == [0] and 1 in run["failed_ranks"]
    assert run["first_failure"].startswith("rank 1 of 3 was killed by SIGKILL")
    assert run["exit_status"] == 137
    assert json.loads((out / "manifest.json").read_text())["options"]["exit_status"] == 137


def test_the_ddp_example_names_its_slow_rank_and_layer(tmp_path: Path, scheduler: str) -> None:
    """examples/train_gpt2_ddp.py: a tiny GPT-2 under DDP whose rank 1 straggles."""
    pytest.importorskip("transformers")
    example = Path(__file__).parents[1] / "examples" / "train_gpt2_ddp.py"
    out = tmp_path / "out"
    command = [sys.executable, "-m", "nsysmap", "run", *WINDOW, "-o", str(out)]
    command += ["--scheduler", scheduler, str(example), "--", "--spawn", "2", "--steps", "3"]
    command += ["--slow-rank", "1"]
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Slowest rank:" in done.stdout and "Straggler cost:" in done.stdout
    assert pl.read_parquet(out / "ranks.parquet")["rank"].to_list() == [0, 1]
    # Only rank 1 runs the straggling module: it is the slowest there, whatever the noise
    # of a shared machine does to the other modules' times.
    modules = pl.read_parquet(out / "rank_module.parquet")
    straggle = modules.filter(pl.col("module") == "module.transformer.h.0.mlp.straggle")
    assert straggle["slowest_rank"].to_list() == [1] and straggle["min_ns"].to_list() == [0]
    assert straggle["max_ns"].item() > 0


CHILD_PROCESSES = """\
import multiprocessing


def work(index):
    print(f"child {index} trains here, without nsysmap's instrumentation")


if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    children = [context.Process(target=work, args=(i,)) for i in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join()
"""


def test_work_done_in_child_processes_is_said_plainly(tmp_path: Path) -> None:
    script = tmp_path / "children.py"
    script.write_text(CHILD_PROCESSES)
    command = [sys.executable, "-m", "nsysmap", "run", "--backend", "torch", str(script)]
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 7, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        "nsysmap: error: children.py ran no step in its own process but in 2 child "
        "process(es), which are not instrumented: start the ranks with `nsysmap run "
        "--nproc-per-node N`, under torchrun, or with torch.multiprocessing.spawn"
    )
    launch = json.loads((tmp_path / "out" / "children" / "capture" / "launch.json").read_text())
    assert launch["child_processes"] == 2 and launch["spawned"] is None


def test_ctrl_c_stops_every_rank_and_their_captures_are_attributed(tmp_path: Path) -> None:
    """Ctrl-C reaches nsysmap, which passes it to torchrun, which passes it to every rank."""
    ready, out = tmp_path / "ready", tmp_path / "out"
    (tmp_path / "tiny_ddp.py").write_text(TINY_DDP)
    command = [sys.executable, "-m", "nsysmap", "run", "--nproc-per-node", "2", "-o", str(out)]
    command += ["--backend", "torch", "--steps", "0", "tiny_ddp.py", "--", "--steps", "100000"]
    env = {**os.environ, "PATH": os.path.dirname(sys.executable), "TINY_DDP_READY": str(ready)}
    code, err = interrupt_when_ready(command, ready, 300, cwd=tmp_path, env=env)
    assert code == 130, err[-3000:]
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(
            "nsysmap: error: ranks 0 and 1 of 2 were interrupted (status 130); outputs for ranks 0 "
            "and 1 are in"
        )
    )
    assert pl.read_parquet(out / "ranks.parquet")["rank"].to_list() == [0, 1]
    steps = pl.read_parquet(out / "rank_steps.parquet").filter(pl.col("step").is_not_null())
    assert steps.group_by("rank").agg(pl.len())["len"].min() >= 2
