"""Reading an analysis directory for `nsysmap report`, and writing the report next to it."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from nsysmap.core.errors import InputNotFound, NotAnOutput
from nsysmap.core.inferred_schemas import BY_INFERRED_BLOCK, INFERRED
from nsysmap.core.schemas import BY_RANGE, OPS, SchemaMismatch, conform
from nsysmap.flops.flops_document import load_flops, load_flops_description
from nsysmap.output.placement import write_failed
from nsysmap.output.read_back import whole
from nsysmap.output.whole_file import written_whole
from nsysmap.output.writer import MANIFEST
from nsysmap.report.answers import RunData
from nsysmap.report.build import ReportResult
from nsysmap.report.fix_first import read_findings
from nsysmap.report.passes import manifest_rules, measure_rules
from nsysmap.report.waits import read_waits
from nsysmap.structure.model import build_structure
from nsysmap.structure.ranges import ranges_from_ops
from nsysmap.structure.table import STRUCTURE

REPORT_MD = "report.md"
ANSWERS_JSON = "answers.json"


def read_run(run_dir: str | Path) -> RunData:
    """The ops table, manifest and model FLOPs of an `attribute` / `run` output directory,
    all of one set however often it is replaced meanwhile (nsysmap.output.read_back)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputNotFound(_not_a_folder(run_dir))
    return whole(run_dir, lambda: _read_run(run_dir))


def _not_a_folder(path: Path) -> str:
    """Why `path`, which is not a folder, cannot be read as an output folder."""
    if not path.is_file():
        return f"{path}: no such directory"
    return (
        f"{path}: is a file; this command reads the output folder of `nsysmap attribute` "
        f"or `nsysmap run`: make one with `nsysmap attribute {path} -o DIR`, then give DIR"
    )


def _read_run(run_dir: Path) -> RunData:
    try:
        manifest = json.loads((run_dir / MANIFEST).read_text())
        ops_file = manifest["tables"]["ops"]["file"]
    except FileNotFoundError as exc:
        raise InputNotFound(
            f"{run_dir}: no {MANIFEST}; give the output directory of nsysmap attribute or run"
        ) from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise NotAnOutput(f"{run_dir / MANIFEST}: not an nsysmap manifest") from exc
    older = older_than(manifest.get("output_schema_version"), RENAMED_WINDOW)
    ranges_file = (manifest["tables"].get("by_range") or {}).get("file")
    inferred_file = (manifest["tables"].get("by_inferred_block") or {}).get("file")
    ops = _table(run_dir / ops_file, OPS, "ops", renamed_window=older)
    structure, note = _structure(run_dir, manifest, ops)
    return RunData(
        label=str(run_dir),
        ops=ops,
        structure=structure,
        structure_note=note,
        manifest=manifest,
        model_flops=load_flops(run_dir, manifest),
        model_info=load_flops_description(run_dir, manifest),
        by_range=_table(run_dir / ranges_file, BY_RANGE, "by_range") if ranges_file else None,
        waits=read_waits(run_dir, manifest),
        findings=read_findings(run_dir, manifest),
        by_inferred_block=(
            _table(run_dir / inferred_file, BY_INFERRED_BLOCK, "by_inferred_block")
            if inferred_file
            else None
        ),
    )


def _file(run_dir: Path, manifest: dict[str, object], table: str) -> Path | None:
    """The file of output table `table`, where the manifest lists one."""
    tables = manifest.get("tables")
    entry = tables.get(table) if isinstance(tables, dict) else None
    name = entry.get("file") if isinstance(entry, dict) else None
    return run_dir / str(name) if name else None


def _structure(
    run_dir: Path, manifest: dict[str, object], ops: pl.DataFrame
) -> tuple[pl.DataFrame, str | None]:
    """structure.parquet; where an older nsysmap wrote none, the structure found again from
    the operations and their inferred labels (the ranges are not in the outputs), said."""
    path = _file(run_dir, manifest, "structure")
    if path is not None:
        return _table(path, STRUCTURE, "structure"), None
    inferred = _file(run_dir, manifest, "inferred")
    labels = _table(inferred, INFERRED, "inferred") if inferred is not None else None
    found = build_structure(
        ops, ranges_from_ops(ops), labels, manifest_rules(manifest), measure_rules(manifest)
    )
    note = (
        "No structure.parquet here (written by an older nsysmap): the structure was found "
        "again from the operations alone, with only their innermost ranges; run `nsysmap "
        "attribute` again for the whole of it."
    )
    return found, note


def _table(
    path: Path, schema: pl.Schema, name: str, *, renamed_window: bool = False
) -> pl.DataFrame:
    """One output table, checked against its schema (NotAnOutput when it is not one).

    `renamed_window`: the table is of an output schema before 1.3, whose
    `attribution` value `window` is now `other_thread`.
    """
    try:
        frame = pl.read_parquet(path)
        if renamed_window and "attribution" in frame.columns:
            frame = frame.with_columns(_renamed_window(pl.col("attribution")))
        return conform(_with_later_columns(frame, schema), schema, name)
    except SchemaMismatch as exc:
        article = "an" if name[0] in "aeiou" else "a"
        raise NotAnOutput(f"{path}: not {article} {name} table of this nsysmap") from exc
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise NotAnOutput(f"{path}: unreadable {name} table: {exc}") from exc


def write_report(result: ReportResult, out_dir: Path, markdown: Path | None = None) -> Path:
    """Write every report table as Parquet and answers.json into `out_dir`, and the Markdown;
    returns the Markdown's path."""
    target = markdown or out_dir / REPORT_MD
    try:
        for name, frame in result.tables.items():
            with written_whole(out_dir / f"{name}.parquet") as draft:
                frame.write_parquet(draft, statistics=True)
        answers = json.dumps(result.answers, indent=1, allow_nan=False, ensure_ascii=False)
        with written_whole(out_dir / ANSWERS_JSON) as draft:
            draft.write_text(answers + "\n")
        with written_whole(target) as draft:
            draft.write_text(result.markdown)
    except OSError as exc:
        raise write_failed(target if exc.filename == str(target) else out_dir, exc) from None
    return target


# The output schema in which the attribution value `window` became `other_thread`.
RENAMED_WINDOW = (1, 3)


def older_than(version: object, than: tuple[int, ...]) -> bool:
    """Is the manifest's `output_schema_version` ("1.2") before `than`? (Unknown: no.)"""
    try:
        return tuple(int(part) for part in str(version).split(".")) < than
    except ValueError:
        return False


def _renamed_window(attribution: pl.Expr) -> pl.Expr:
    """An attribution column of an older output with `window` read as `other_thread`."""
    text = attribution.cast(pl.String)
    return (
        pl.when(text == "window").then(pl.lit("other_thread")).otherwise(text).alias("attribution")
    )


# OPS columns added after output schema 1.0: older outputs read them as null.
LATER_COLUMNS: tuple[str, ...]
LATER_COLUMNS = ("rank", "graph_id", "graph_node_id", "capture_range_path")
LATER_COLUMNS += ("compiled_graph", "fused_modules", "other_thread_range_id")


# Before output schema 1.5, warm-up work had phase `warmup` (no `warmup` column):
# read as `warmup` true and phase null.
WARMUP = "warmup"


def _with_later_columns(frame: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
    """`frame` with the LATER_COLUMNS of `schema` it lacks, as nulls, and the
    `warmup` mark of an output that had a warm-up phase instead."""
    missing = [c for c in LATER_COLUMNS if c in schema and c not in frame.columns]
    frame = frame.with_columns(pl.lit(None, schema[c]).alias(c) for c in missing)
    if WARMUP in schema and WARMUP not in frame.columns and "phase" in frame.columns:
        warm = (pl.col("phase") == WARMUP).fill_null(False)
        frame = frame.with_columns(
            warm.alias(WARMUP), pl.when(~warm).then(pl.col("phase")).alias("phase")
        )
    return frame
