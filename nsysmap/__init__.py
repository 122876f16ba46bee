"""nsysmap: where the GPU time of PyTorch training goes, from Nsight Systems reports.

The public verbs form one flow::

    report = nsysmap.load_report("run.sqlite")   # read + normalise
    result = nsysmap.attribute(report)           # every GPU op -> step, phase, module
    tables = nsysmap.summarize(result)           # by phase, module, kernel, ...
    nsysmap.write(result, tables, "out/")        # Parquet + manifest.json
"""

from nsysmap._version import __version__

__all__ = ["__version__"]
