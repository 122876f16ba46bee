"""`nsysmap run SCRIPT [-- ARGS...]`: profile a training script and attribute it."""

from __future__ import annotations

from pathlib import Path

import click

from nsysmap.attribution.rules import user_rules
from nsysmap.capture.distributed import run_any
from nsysmap.capture.profile_script import BACKENDS, RunRequest
from nsysmap.cli.options import name_rule_options, output_option


@click.command(
    "run",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.argument("script", type=click.Path(path_type=Path, readable=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@output_option("out/<script name>")
@click.option(
    "--backend",
    type=click.Choice(BACKENDS),
    default="auto",
    show_default=True,
    help="Profiler: nsys (Nsight Systems), torch (torch.profiler), or nsys when found.",
)
@click.option(
    "--warmup-steps",
    type=click.IntRange(min=0),
    help="Steps to run before profiling starts (launcher default: 1).",
)
@click.option(
    "--steps",
    type=click.IntRange(min=0),
    help="Steps to profile, 0 for all until the script ends (launcher default: 3).",
)
@click.option("--no-record-shapes", is_flag=True, help="Do not record operator input shapes.")
@click.option(
    "--memory-gb",
    type=click.FloatRange(min=0, min_open=True),
    help="Memory budget for the attribution, as for `nsysmap attribute` "
    "(default: 6 GB, or 80% of the memory available where less).",
)
@click.option(
    "--nproc-per-node",
    type=click.IntRange(min=1),
    help="Start N ranks of a distributed job through torchrun's launcher and profile each "
    "(docs/run.md, Distributed training).",
)
@click.option(
    "--one-nsys-report",
    is_flag=True,
    help="With --nproc-per-node and nsys: one nsys report for the whole job, not one per rank.",
)
@click.option(
    "--scheduler",
    metavar="ADDRESS",
    help="Distributed runs: attribute the ranks on this Dask scheduler (default: a local cluster).",
)
@name_rule_options
@click.option("--quiet", is_flag=True, help="Do not print the summary.")
def run_command(
    script: Path,
    script_args: tuple[str, ...],
    out_dir: Path | None,
    backend: str,
    warmup_steps: int | None,
    steps: int | None,
    no_record_shapes: bool,
    memory_gb: float | None,
    nproc_per_node: int | None,
    one_nsys_report: bool,
    scheduler: str | None,
    step_rules: tuple[str, ...],
    phase_rules: tuple[str, ...],
    quiet: bool,
) -> None:
    """Run SCRIPT under a profiler and attribute its GPU work (or CPU operators).

    Everything after SCRIPT (after an optional `--`) goes to the script
    unchanged. Outputs for what was captured are written even when the
    script fails; nsysmap then exits with the script's own status. Under
    torchrun, with --nproc-per-node, or for a script that spawns its ranks
    (torch.multiprocessing.spawn), each rank is captured and the ranks are
    attributed together (docs/run.md).
    """
    if script_args[:1] == ("--",):
        script_args = script_args[1:]
    request = RunRequest(
        script=script,
        script_args=script_args,
        out_dir=out_dir,
        backend=backend,
        warmup_steps=warmup_steps,
        steps=steps,
        record_shapes=not no_record_shapes,
        rules=user_rules(step_rules, phase_rules),
        memory_gb=memory_gb,
        nproc_per_node=nproc_per_node,
        one_nsys_report=one_nsys_report,
        scheduler=scheduler,
    )
    result = run_any(request, notify=lambda line: click.echo(line, err=True))
    if not quiet:
        click.echo(result.summary_text, nl=False)
    for warning in result.warnings:
        click.echo(f"nsysmap: warning: {warning}", err=True)
    click.echo(result.done_line())
    failure = result.failure()
    if failure is not None:
        raise failure
