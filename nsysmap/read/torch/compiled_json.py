"""Reading `compiled.json` (which modules each torch.compile'd kernel came from).

`nsysmap run` captures it next to the trace (instrument/launch/provenance.py); the
format is instrument/compiled_doc.py, the module both sides share. A trace
read from a capture directory picks it up (`attach_compiled`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import polars as pl

from instrument import compiled_doc, contract
from nsysmap.core import schemas
from nsysmap.core.errors import NotAProfile
from nsysmap.core.profile import NestedProfile


def read_compiled(path: Path) -> pl.DataFrame:
    """COMPILED_KERNELS rows of a compiled.json; NotAProfile when it is not one."""
    try:
        rows = compiled_doc.kernel_rows(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise NotAProfile(f"{path}: not an nsysmap compiled-kernel document ({exc})") from exc
    return pl.DataFrame(rows, schema=schemas.COMPILED_KERNELS, strict=False)


def attach_compiled(profile: NestedProfile, trace: Path) -> NestedProfile:
    """The profile with the compiled.json found next to `trace`, if there is one."""
    doc = trace.parent / contract.COMPILED
    if not doc.is_file():
        return profile
    return replace(profile, compiled=read_compiled(doc)).checked()
