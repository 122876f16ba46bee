"""nsysmap: where the GPU time of PyTorch training goes, from Nsight Systems reports.

The public verbs form one flow::

    import nsysmap
    profile = nsysmap.load_profile("run.sqlite")     # read + normalise: a NestedProfile
    analysis = nsysmap.analyse(profile)              # attribute + summarise + infer (pure)
    nsysmap.write(analysis, "out/")                  # Parquet tables and manifest.json

`attribute` and `summarise` are its first two steps on their own;
`analyse_file` is the whole flow from a file (what `nsysmap attribute` runs).
Everything not in `__all__` is private to the package (docs/api.md).
"""

from nsysmap._version import __version__
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
