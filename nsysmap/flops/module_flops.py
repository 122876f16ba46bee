"""FLOP counts per module, read from the JSON document `instrument.flops` writes.

Counting needs torch, which nsysmap never imports: `count` runs
`python -m instrument.flops` in a subprocess and returns its document; the
functions below turn the document into declared Polars tables. Rows are
exclusive ("self"): an operator counts once, for the innermost module that ran
it, so that rows sum without double counting; `by_module(inclusive=True)` adds
each module's descendants. Module paths are those of `named_modules()`, as in
the `module` column of the attribution tables; null means no module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap.core.errors import ExitCode, NsysmapError, ToolMissing
from nsysmap.core.schemas import DIRECTIONS, Direction, conform, declare

FORMAT = "nsysmap-flops"
VERSION = 1

# One row per (module, direction, operator, part, input shapes).
FLOPS = declare(
    {
        "module": pl.String,  # fully qualified module path, "" for the root, null for none
        "module_class": pl.String,
        "direction": Direction,
        "op": pl.String,  # aten operator, profiler spelling: "aten::addmm"
        "part": pl.String,  # "" or one matmul of an attention operator: "scores", ...
        "kind": pl.String,  # matmul, attention, pointwise, softmax, norm, ... (docs/flops.md)
        "input_shapes": pl.String,  # e.g. "[[2304], [1024, 768], [768, 2304]]"
        "calls": pl.Int64,
        "matmul_flop": pl.Int64,  # exact, 2·m·k·n per matmul
        "other_flop_estimate": pl.Int64,  # estimate: elements × a factor per kind
    }
)
MODULES = declare({"module": pl.String, "module_class": pl.String, "depth": pl.Int64})
MODULE_FLOPS = declare(
    {
        "module": pl.String,
        "module_class": pl.String,
        "depth": pl.Int64,  # 0 for the root, 1 for its children, ...
        "forward_matmul_flop": pl.Int64,
        "backward_matmul_flop": pl.Int64,
        "forward_other_flop_estimate": pl.Int64,
        "backward_other_flop_estimate": pl.Int64,
    }
)
DIRECTION_FLOPS = declare(
    {
        "direction": Direction,
        "matmul_flop": pl.Int64,
        "recompute_flop": pl.Int64,  # part of matmul_flop: attention scores recomputed
        "other_flop_estimate": pl.Int64,
    }
)
BLOCK_FLOPS = declare(
    {
        "parent": pl.String,  # e.g. "transformer.h"
        "module_class": pl.String,
        "blocks": pl.Int64,
        **{
            name: dtype
            for name, dtype in MODULE_FLOPS.items()
            if name.endswith(("_flop", "_estimate"))
        },
    }
)
RECOMPUTE_PARTS = ("recompute_scores",)
_SUMS = [name for name in MODULE_FLOPS.names() if name.endswith(("_flop", "_estimate"))]


class FlopsToolMissing(ToolMissing):
    """torch (or transformers, or nsysmap's instrument package) cannot be imported."""


class FlopsSpecError(NsysmapError):
    """A bad model description: factory, config, sizes."""

    exit_code = ExitCode.USAGE


class FlopsCountFailed(NsysmapError):
    """The model raised while running on fake tensors."""

    exit_code = ExitCode.SCRIPT_FAILED


class FlopsFormatError(NsysmapError):
    """The counter wrote something that is not a FLOP document of this version."""

    exit_code = ExitCode.UNUSABLE_INPUT


# Exit statuses of `python -m instrument.flops` (instrument/flops/).
_COUNTER_ERRORS: dict[int, type[NsysmapError]] = {
    2: FlopsSpecError,
    3: FlopsToolMissing,
    4: FlopsSpecError,
    5: FlopsCountFailed,
}


def count(options: Sequence[str], *, python: str | None = None) -> dict[str, Any]:
    """Run `python -m instrument.flops OPTIONS --json` and return its document."""
    interpreter = python or sys.executable
    command = [interpreter, "-m", "instrument.flops", *options, "--json"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    root = Path(__file__).resolve().parent.parent
    if (root / "instrument" / "flops.py").is_file():
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    except OSError as exc:
        raise FlopsToolMissing(f"cannot run {interpreter}: {exc.strerror or exc}") from exc
    if done.returncode != 0:
        raise _counter_error(done.returncode, done.stderr, interpreter)
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise FlopsFormatError(f"instrument.flops wrote no JSON document: {exc}") from exc


def _counter_error(status: int, stderr: str, interpreter: str) -> NsysmapError:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    prefix = "instrument.flops: error: "
    ours = [line.removeprefix(prefix) for line in lines if line.startswith(prefix)]
    if status in _COUNTER_ERRORS:
        message = ours[-1] if ours else (lines[-1] if lines else f"exit status {status}")
        return _COUNTER_ERRORS[status](message)
    last = lines[-1] if lines else f"exit status {status}"
    if "No module named" in last:
        return FlopsToolMissing(f"{last} (interpreter {interpreter})")
    return FlopsCountFailed(f"instrument.flops failed with status {status}: {last}")


def _checked(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise FlopsFormatError("not an nsysmap FLOP document")
    if doc.get("version") != VERSION:
        raise FlopsFormatError(f"FLOP document version {doc.get('version')}, expected {VERSION}")
    return doc


def flops_table(doc: dict[str, Any]) -> pl.DataFrame:
    """The document's rows as a FLOPS table (exclusive counts)."""
    rows = _checked(doc).get("rows", [])
    raw = declare({**FLOPS, "direction": pl.String})
    try:
        frame = pl.DataFrame(rows, schema=raw)
    except (TypeError, ValueError, pl.exceptions.PolarsError) as exc:
        raise FlopsFormatError(f"FLOP document rows do not match the schema: {exc}") from exc
    return conform(frame, FLOPS, "flops")


def module_table(doc: dict[str, Any]) -> pl.DataFrame:
    """Every module of the model, in `named_modules()` order, with its depth."""
    entries = _checked(doc).get("modules", [])
    frame = pl.DataFrame(entries, schema={"module": pl.String, "module_class": pl.String})
    depth = (
        pl.when(pl.col("module") == "")
        .then(0)
        .otherwise(pl.col("module").str.count_matches(r"\.") + 1)
    )
    return conform(frame.with_columns(depth=depth), MODULES, "flop modules")


def counter_table(doc: dict[str, Any]) -> pl.DataFrame:
    """FlopCounterMode's own per-module totals (submodules included), for checking."""
    entries = _checked(doc).get("flop_counter", {}).get("modules", [])
    schema = {"module": pl.String, "direction": pl.String, "matmul_flop": pl.Int64}
    frame = pl.DataFrame(entries, schema=schema)
    return frame.with_columns(pl.col("direction").cast(Direction))


def _with_ancestors(rows: pl.DataFrame) -> pl.DataFrame:
    """Each row once per ancestor module (itself included): "a.b" -> "", "a", "a.b"."""
    parts = pl.col("module").str.split(".")
    length = pl.when(pl.col("module") == "").then(0).otherwise(parts.list.len())
    return (
        rows.with_columns(_k=pl.int_ranges(0, length + 1))
        .explode("_k")
        .with_columns(module=parts.list.slice(0, pl.col("_k")).list.join("."))
        .drop("_k")
    )


def by_module(
    table: pl.DataFrame, modules: pl.DataFrame, *, inclusive: bool = False
) -> pl.DataFrame:
    """FLOPs per module and direction; `inclusive` adds the module's descendants.

    Modules without operators keep a row of zeros; operators outside every
    module are left out (see `by_direction` for the grand totals).
    """
    rows = table.filter(pl.col("module").is_not_null())
    if inclusive:
        rows = _with_ancestors(rows)

    def total(column: str, direction: str) -> pl.Expr:
        return pl.col(column).filter(pl.col("direction") == direction).sum()

    sums = rows.group_by("module").agg(
        **{
            f"{d}_{c}": total(c, d)
            for d in DIRECTIONS
            for c in ("matmul_flop", "other_flop_estimate")
        }
    )
    joined = modules.join(sums, on="module", how="left", maintain_order="left")
    return conform(joined.with_columns(pl.col(_SUMS).fill_null(0)), MODULE_FLOPS, "module flops")


def by_direction(table: pl.DataFrame) -> pl.DataFrame:
    """Grand totals per direction, operators outside modules included."""
    recompute = pl.col("matmul_flop").filter(pl.col("part").is_in(RECOMPUTE_PARTS)).sum()
    sums = table.group_by("direction").agg(
        matmul_flop=pl.col("matmul_flop").sum(),
        recompute_flop=recompute,
        other_flop_estimate=pl.col("other_flop_estimate").sum(),
    )
    both = pl.DataFrame({"direction": list(DIRECTIONS)}, schema={"direction": Direction})
    joined = both.join(sums, on="direction", how="left", maintain_order="left").fill_null(0)
    return conform(joined, DIRECTION_FLOPS, "direction flops")


def repeated_blocks(module_flops: pl.DataFrame) -> pl.DataFrame:
    """Children numbered 0, 1, ... of one parent (a ModuleList of blocks), summed.

    Give it inclusive counts: `transformer.h` with 12 GPT2Block children.
    """
    numbered = module_flops.filter(pl.col("module").str.contains(r"\.\d+$"))
    grouped = (
        numbered.with_columns(parent=pl.col("module").str.replace(r"\.\d+$", ""))
        .group_by("parent", maintain_order=True)
        .agg(pl.col("module_class").first(), pl.len().alias("blocks"), pl.col(_SUMS).sum())
        .filter(pl.col("blocks") > 1)
    )
    return conform(grouped, BLOCK_FLOPS, "block flops")
