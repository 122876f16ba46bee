"""nsysmap: where the GPU time of PyTorch training goes, from Nsight Systems reports.

The public verbs form one flow::

    import nsysmap
    report = nsysmap.load_report("run.sqlite")     # read + normalise: a NestedReport
    ops = nsysmap.attribute(report)                # every GPU op -> step, phase, module
    tables = nsysmap.summarize(ops, report.ranges) # by phase, module, kernel, range
    nsysmap.analyse(report, "out/")                # all of it, written as Parquet

Everything else is private to the package.
"""

from nsysmap._version import __version__
from nsysmap.attribution.attribute import attribute
from nsysmap.model import NestedReport, Report
from nsysmap.output.summarize import Summaries, summarize
from nsysmap.pipeline import Analysis, analyse, analyse_file, analyse_report, load_report

__all__ = [
    "Analysis",
    "NestedReport",
    "Report",
    "Summaries",
    "__version__",
    "analyse",
    "analyse_file",
    "analyse_report",
    "attribute",
    "load_report",
    "summarize",
]
