"""nsysmap: where the GPU time of PyTorch training goes, from Nsight Systems reports.

The public verbs form one flow::

    import nsysmap
    profile = nsysmap.load_profile("run.sqlite")     # read + normalise: a NestedProfile
    analysis = nsysmap.analyse(profile)              # attribute + summarise + infer (pure)
    nsysmap.write(analysis, "out/")                  # Parquet tables and manifest.json

`attribute` and `summarise` are its first two steps on their own;
`analyse_file` is the whole flow from a file (what `nsysmap attribute` runs).
Everything not in `__all__` is private to the package (docs/api.md).

Each name is imported when first used, so that `import nsysmap.<module>` (the
console script, nsysmap.console, first of all) does not load Polars and the
flow before it needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from nsysmap._version import __version__

if TYPE_CHECKING:
    from nsysmap.attribution.attribute import attribute
    from nsysmap.core.profile import NestedProfile, Profile
    from nsysmap.flow.verbs import Analysis, analyse, analyse_file, load_profile, write
    from nsysmap.summaries.summarise import Summaries, summarise

__all__ = [
    "Analysis",
    "NestedProfile",
    "Profile",
    "Summaries",
    "__version__",
    "analyse",
    "analyse_file",
    "attribute",
    "load_profile",
    "summarise",
    "write",
]

# Where each public name lives (imported on first use).
_HOMES = {
    "attribute": "nsysmap.attribution.attribute",
    "Summaries": "nsysmap.summaries.summarise",
    "summarise": "nsysmap.summaries.summarise",
    "Analysis": "nsysmap.flow.verbs",
    "analyse": "nsysmap.flow.verbs",
    "analyse_file": "nsysmap.flow.verbs",
    "load_profile": "nsysmap.flow.verbs",
    "write": "nsysmap.flow.verbs",
    "NestedProfile": "nsysmap.core.profile",
    "Profile": "nsysmap.core.profile",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'nsysmap' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
