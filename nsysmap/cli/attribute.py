"""`nsysmap attribute REPORT... [-o DIR]`: attribute existing reports and write the outputs.

One report file: the single-report flow (nsysmap.flow.verbs). Several files, a
directory, a glob, or `--ranks`: one multi-rank output, each report attributed
as a Dask task (nsysmap.many; docs/many.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nsysmap.attribution.rules import NameRules, user_rules
from nsysmap.cli.options import name_rule_options, output_option
from nsysmap.core.errors import ExitCode, NsysmapError, SomeProfilesFailed
from nsysmap.findings import with_findings
from nsysmap.flow.verbs import analyse_file
from nsysmap.structure.regions import measure_rules as checked_measure_rules

if TYPE_CHECKING:
    from nsysmap.many.task import Outcome

_GLOB_CHARS = re.compile(r"[*?\[]")
CLUSTER_OPTIONS = ("scheduler", "workers", "threads_per_worker", "memory_limit")


@click.command("attribute")
@click.argument(
    "reports",
    nargs=-1,
    required=True,
    metavar="REPORT...",
    type=click.Path(path_type=Path, readable=False),
)
@output_option("out/<report name>; several reports: out/<directory name> or out/ranks")
@name_rule_options
@click.option(
    "--measure",
    "measure_rules",
    multiple=True,
    metavar="REGEX",
    help="Ranges whose name matches REGEX hold the measured work (the timed loop): the "
    "measured region of the structure model, before what the structure would choose. "
    "Repeatable.",
)
@click.option("--quiet", is_flag=True, help="Do not print the summary.")
@click.option(
    "--no-infer",
    "no_infer",
    is_flag=True,
    help="Do not infer steps, phases and blocks from the repeating kernel sequence.",
)
@click.option(
    "--memory-gb",
    type=click.FloatRange(min=0, min_open=True),
    help="Memory budget: an nsys export expected to need more is attributed one process "
    "or time window at a time (default: 6 GB, or 80% of the memory available where less); "
    "a trace needing more is refused (exit 14; default: 80% of the memory available).",
)
@click.option(
    "--ranks",
    "as_ranks",
    is_flag=True,
    help="Write the multi-rank outputs even for one report (one rank per process).",
)
@click.option(
    "--scheduler", metavar="ADDRESS", help="Run on this Dask scheduler (tcp://host:8786)."
)
@click.option(
    "--workers", type=click.IntRange(min=1), help="Local Dask workers (default: sized to fit)."
)
@click.option(
    "--threads-per-worker", type=click.IntRange(min=1), help="Threads per local worker (default 1)."
)
@click.option("--memory-limit", metavar="BYTES", help="Memory per local worker, e.g. 4GB.")
def attribute_command(
    reports: tuple[Path, ...],
    out_dir: Path | None,
    step_rules: tuple[str, ...],
    phase_rules: tuple[str, ...],
    measure_rules: tuple[str, ...],
    quiet: bool,
    no_infer: bool,
    memory_gb: float | None,
    as_ranks: bool,
    **cluster: Any,  # click has checked each against its option type
) -> None:
    """Attribute every GPU operation in REPORT to its step, phase and module.

    REPORT is an nsys SQLite export (.sqlite), an nsys report (.nsys-rep,
    exported with `nsys export` when nsys is on PATH) or a torch.profiler
    trace (.json, .json.gz). Writes Parquet tables and manifest.json.
    Several reports (files, a directory, a glob) are the ranks of one job:
    see docs/many.md.
    """
    rules = user_rules(step_rules, phase_rules)
    measure = checked_measure_rules(measure_rules)
    if as_ranks or _several(reports):
        if measure:
            raise click.UsageError("--measure applies to one report (not to the ranks of a job)")
        _attribute_many(reports, out_dir, quiet, cluster, rules)
        return
    if any(cluster[name] is not None for name in CLUSTER_OPTIONS):
        raise click.UsageError("--scheduler, --workers, ... apply to several reports (or --ranks)")
    report = reports[0]
    target = out_dir or Path("out") / report.name.split(".")[0]
    analysis = analyse_file(
        report,
        target,
        options={"command": "attribute"},
        rules=rules,
        infer=not no_infer,
        memory_gb=memory_gb,
        measure=measure,
        before_write=with_findings,
    )
    if not quiet:
        click.echo(analysis.summary_text, nl=False)
    click.echo(f"Wrote {len(analysis.manifest['tables'])} tables and manifest.json to {target}")


def _several(reports: tuple[Path, ...]) -> bool:
    """More than one argument, a directory, or a pattern that names no file."""
    if len(reports) > 1:
        return True
    one = reports[0]
    return one.is_dir() or (not one.exists() and bool(_GLOB_CHARS.search(str(one))))


def _attribute_many(
    reports: tuple[Path, ...],
    out_dir: Path | None,
    quiet: bool,
    cluster: dict[str, Any],
    rules: NameRules,
) -> None:
    from nsysmap.core.inert import terminal_text
    from nsysmap.many import ClusterOptions, run_many
    from nsysmap.many.ranks_text import not_one_job

    single_dir = len(reports) == 1 and reports[0].is_dir()
    target = out_dir or Path("out") / (reports[0].resolve().name if single_dir else "ranks")
    where = ClusterOptions(
        scheduler=cluster["scheduler"],
        workers=cluster["workers"],
        threads_per_worker=cluster["threads_per_worker"],
        memory_limit_bytes=_bytes(cluster["memory_limit"]),
    )
    options = {"command": "attribute", **{k: v for k, v in cluster.items() if v is not None}}
    options.update(rules.options())
    result = run_many(reports, target, where=where, options=options, rules=rules)
    if not quiet:
        click.echo(result.summary_text, nl=False)
    doubt = not_one_job(result.manifest)
    if doubt:
        click.echo(f"nsysmap: warning: {terminal_text(doubt)} (docs/many.md)", err=True)
    n_tables = len(result.manifest["tables"])
    click.echo(f"Wrote the ops dataset, {n_tables - 1} tables and manifest.json to {target}")
    if result.failed:
        raise _failure(result.failed, len(result.outcomes))


def _failure(failed: list[Outcome], total: int) -> NsysmapError:
    """Some failed: SOME_FAILED; every one failed, all alike: their own code."""
    names = ", ".join(Path(o.path).name for o in failed)
    message = f"{len(failed)} of {total} reports failed ({names}); the others were written"
    codes = {o.exit_code for o in failed}
    if len(failed) == total and len(codes) == 1:
        (code,) = codes
        if code is not None:  # always: a failed outcome carries its code
            return NsysmapError(f"every report failed ({names})", exit_code=ExitCode(code))
    return SomeProfilesFailed(message)


def _bytes(text: object) -> int | None:
    """'4GB', '512MiB', '1e9' -> bytes (None when not given)."""
    if text is None:
        return None
    from dask.utils import parse_bytes

    try:
        return int(parse_bytes(str(text)))
    except ValueError as exc:
        raise click.BadParameter(f"{text!r} is not a size", param_hint="--memory-limit") from exc
