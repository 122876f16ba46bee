"""The profiled model's FLOP document next to an analysis: flops.json -> flops.parquet.

`python -m instrument.launch` (under `nsysmap run`) writes DIR/capture/flops.json:
the FLOP document of docs/flops.md for one step of the model it profiled,
counted on fake tensors with the input shape of the model's first forward
call, plus `compute_dtype` (autocast's dtype, else the parameters'; "tf32" when
enabled) and `source`. `attach_model_flops` adds it to an analysis before it
is written: the `FLOPS` table of nsysmap.flops.module_flops, written as
`flops.parquet` and listed under `tables.flops` in manifest.json, and the
document's description (everything but its rows) under `model_flops`; the
manifest is written once, with everything. `load_flops` reads it back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from instrument.contract import CAPTURE_DIR
from instrument.contract import FLOPS as FLOPS_JSON
from nsysmap.flops.module_flops import FlopsFormatError, flops_table
from nsysmap.flow.verbs import Analysis, with_tables
from nsysmap.output.writer import MANIFEST

FLOPS_TABLE = "flops"
_BULKY = ("rows", "modules", "flop_counter")


def read_document(path: Path) -> dict[str, Any] | None:
    """The FLOP document at `path`, None when there is none or it is not one."""
    try:
        doc = json.loads(path.read_text())
        flops_table(doc)  # checks format, version and rows
    except (OSError, ValueError, FlopsFormatError):
        return None
    return doc


def describe(doc: dict[str, Any]) -> dict[str, Any]:
    """The document without its rows, module list and cross-check: what was counted."""
    return {key: value for key, value in doc.items() if key not in _BULKY}


def attach_model_flops(analysis: Analysis, capture_dir: Path) -> Analysis:
    """The analysis with the FLOPS table of capture_dir/flops.json to write, and its description.

    Pure but for reading flops.json: the table joins the analysis's tables
    (written by `verbs.write` as flops.parquet, listed under
    `tables.flops`), the description goes to the manifest under
    `model_flops`. Without a usable document there is no table and
    `model_flops.error` says why. Never raises for a missing or bad
    document: FLOPs are optional.
    """
    source = Path(capture_dir) / FLOPS_JSON
    doc = read_document(source) if source.is_file() else None
    if doc is None:
        why = "not a FLOP document of this version" if source.is_file() else "no flops.json"
        return with_tables(analysis, {}, model_flops={"error": f"{source}: {why}"})
    return with_tables(analysis, {FLOPS_TABLE: flops_table(doc)}, model_flops=describe(doc))


def load_flops(run_dir: Path, manifest: dict[str, Any] | None = None) -> pl.DataFrame | None:
    """The FLOPS table of the profiled model, None when there is none.

    The table the manifest lists (`attach_model_flops` ran); else, when the
    manifest says nothing about model FLOPs, the capture's flops.json.
    `manifest`: run_dir's manifest when the caller has read it already.
    """
    run_dir = Path(run_dir)
    if manifest is None:
        try:
            manifest = json.loads((run_dir / MANIFEST).read_text())
        except (OSError, ValueError):
            manifest = {}
    listed = (manifest.get("tables") or {}).get(FLOPS_TABLE)
    if isinstance(listed, dict) and (run_dir / str(listed.get("file"))).is_file():
        return pl.read_parquet(run_dir / str(listed["file"]))
    if "model_flops" in manifest:  # attached, and there was none
        return None
    doc = read_document(run_dir / CAPTURE_DIR / FLOPS_JSON)
    return None if doc is None else flops_table(doc)


def load_flops_description(run_dir: Path, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """What the FLOP document counted (model, input shape, compute dtype, ...), or None."""
    described = manifest.get("model_flops")
    if isinstance(described, dict) and "error" not in described:
        return described
    doc = read_document(Path(run_dir) / CAPTURE_DIR / FLOPS_JSON)
    return None if doc is None else describe(doc)
