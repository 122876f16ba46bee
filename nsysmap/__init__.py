"""nsysmap: where the GPU time of PyTorch training goes, from Nsight Systems reports.

The public verbs form one flow::

    import nsysmap
    report = nsysmap.load_report("run.sqlite")     # read + normalise: a NestedReport
    analysis = nsysmap.analyse(report)             # attribute + summarise + infer (pure)
    nsysmap.write(analysis, "out/")                # Parquet tables and manifest.json

`attribute` and `summarize` are its first two steps on their own;
`analyse_file` is the whole flow from a file (what `nsysmap attribute` runs).
Everything not in `__all__` is private to the package (docs/api.md).
"""

from nsysmap._version import __version__
from nsysmap.attribution.attribute import attribute
from nsysmap.model import NestedReport, Report
from nsysmap.output.summarize import Summaries, summarize
from nsysmap.pipeline import Analysis, analyse, analyse_file, load_report, write

__all__ = [
    "Analysis",
    "NestedReport",
    "Report",
    "Summaries",
    "__version__",
    "analyse",
    "analyse_file",
    "attribute",
    "load_report",
    "summarize",
    "write",
]
