"""The straightforward SQL attribution, in SQLite itself, for comparison.

    python -m bench.sql_engine EXPORT WORKDIR

What a user would write: index the API calls by correlation id and the NVTX
events by (thread, start), join each GPU operation to its launch call, and
take the latest-starting range on the launching thread that is still open
at the launch time. The export is first copied into WORKDIR (indexes are
written into the database; the copy is not timed). Writes the totals per
range (NVTX rowid, operations, summed duration) to WORKDIR/sql_totals.parquet
and prints one JSON line: seconds to build the indexes and to run the query.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import time
from pathlib import Path

import polars as pl

INDEXES = (
    "CREATE INDEX bench_runtime_corr ON CUPTI_ACTIVITY_KIND_RUNTIME (correlationId)",
    "CREATE INDEX bench_nvtx_thread_start ON NVTX_EVENTS (globalTid, start)",
)
# globalPid >> 24 and globalTid >> 24 agree when the process does (nsys id encoding).
QUERY = """
WITH ops AS (
    SELECT correlationId, globalPid, start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL
    UNION ALL SELECT correlationId, globalPid, start, "end" FROM CUPTI_ACTIVITY_KIND_MEMCPY
    UNION ALL SELECT correlationId, globalPid, start, "end" FROM CUPTI_ACTIVITY_KIND_MEMSET
),
launched AS (
    SELECT o."end" - o.start AS dur, r.globalTid AS thread, r.start AS t
    FROM ops AS o
    LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r
        ON r.correlationId = o.correlationId
        AND r.globalTid / 16777216 = o.globalPid / 16777216
        AND r.eventClass <> 67
)
SELECT
    (SELECT n.rowid FROM NVTX_EVENTS AS n
     WHERE n.globalTid = l.thread AND n.start <= l.t AND n."end" > l.t
       AND n.eventType IN (59, 60)
     ORDER BY n.start DESC LIMIT 1) AS range_rowid,
    count(*) AS ops,
    sum(l.dur) AS time_ns
FROM launched AS l
GROUP BY range_rowid
"""


def run(export: Path, workdir: Path) -> dict[str, float]:
    """Copy, index, query; the totals go to workdir/sql_totals.parquet."""
    workdir.mkdir(parents=True, exist_ok=True)
    db = workdir / "export.sqlite"
    shutil.copyfile(export, db)
    try:
        with sqlite3.connect(db) as conn:
            start = time.perf_counter()
            for statement in INDEXES:
                conn.execute(statement)
            indexed = time.perf_counter()
            rows = conn.execute(QUERY).fetchall()
            done = time.perf_counter()
    finally:
        db.unlink(missing_ok=True)
    schema = {"range_rowid": pl.Int64, "ops": pl.Int64, "time_ns": pl.Int64}
    pl.DataFrame(rows, schema=schema, orient="row").write_parquet(workdir / "sql_totals.parquet")
    return {"index_s": indexed - start, "query_s": done - indexed, "seconds": done - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("export", type=Path)
    parser.add_argument("workdir", type=Path)
    args = parser.parse_args()
    print(json.dumps(run(args.export, args.workdir)))


if __name__ == "__main__":
    main()
