"""Runs inside the training process: NVTX ranges for steps, phases and modules.

    from instrument import annotate
    with annotate(model, optimizer):      # or @annotate() on a function
        train()

`install()`/`uninstall()` do the same without a `with` block (the launcher,
`python -m instrument.launch`, uses them). Importing this package does not
import torch; the names below load it on first use.

Subpackages: `ranges` (the session, its hooks and emitters, range names),
`launch` (the launcher: profile window, the model's first call, compiled-kernel
provenance, spawned ranks), `flops` (FLOP counting on fake tensors).
`contract` (the capture directory, launch.json and a job's rank.json) and
`compiled_doc` (compiled.json) are the formats nsysmap reads back; like
`ranges.naming`, `flops.estimates` and `rank_guard` (one rank of a torchrun
job: its training process waited for, its end recorded) they import neither
torch nor polars.
"""

from __future__ import annotations

from typing import Any

__all__ = ["active", "annotate", "install", "uninstall"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from instrument.ranges import session

        return getattr(session, name)
    raise AttributeError(f"module 'instrument' has no attribute {name!r}")
