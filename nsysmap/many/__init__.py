"""Several reports at once (the ranks of one job) attributed in parallel on Dask.

`run_many(inputs, out_dir)` attributes each report as `nsysmap attribute`
does for one, as one Dask task per report, on a local cluster sized to the
machine or on an existing scheduler, and writes one multi-rank output: the
operations as a Hive-partitioned Parquet dataset (`ops/rank=N/`), the summary
tables with a `rank` column, cross-rank tables (steps, stragglers, module
spread, communication) and a manifest listing every input. See docs/many.md.
Dask is imported only when a run starts.
"""

from nsysmap.many.run_many import ClusterOptions, ManyResult, run_many

__all__ = ["ClusterOptions", "ManyResult", "run_many"]
