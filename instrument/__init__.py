"""Runs inside the training process: NVTX ranges for steps, phases and modules.

    from instrument import annotate
    with annotate(model, optimizer):      # or @annotate() on a function
        train()

`install()`/`uninstall()` do the same without a `with` block (the launcher,
`python -m instrument.launch`, uses them). Importing this package does not
import torch; the names below load it on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["active", "annotate", "install", "uninstall"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from instrument import session

        return getattr(session, name)
    raise AttributeError(f"module 'instrument' has no attribute {name!r}")
