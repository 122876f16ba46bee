"""The floor: reading only the columns attribution needs into Arrow, as fast as possible.

    python -m bench.floor EXPORT [--reader adbc|connectorx]

Reads the GPU activity tables (times, device, stream, correlation id,
process; kernel name ids), the CUDA API calls (start, class, thread,
correlation id, name id), NVTX_EVENTS (times, type, thread, text, text id,
domain) and StringIds, as plain columns (no casts, no text decoding), in
two threads, the large tables split in two by rowid so that the threads
finish together. Prints one JSON line: rows read and seconds.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa

THREADS = 2
# table -> the columns attribution needs (fixed identifiers, no data in the SQL)
COLUMNS = {
    "NVTX_EVENTS": 'start, "end", eventType, globalTid, text, textId, domainId',
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        'start, "end", deviceId, streamId, correlationId, globalPid, demangledName, shortName'
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": "start, eventClass, globalTid, correlationId, nameId",
    "CUPTI_ACTIVITY_KIND_MEMCPY": 'start, "end", deviceId, streamId, correlationId, globalPid',
    "CUPTI_ACTIVITY_KIND_MEMSET": 'start, "end", deviceId, streamId, correlationId, globalPid',
    "StringIds": "id, value",
}
SPLIT = ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME")


def _adbc(path: Path, sql: str, params: tuple[int, int] | None) -> pa.Table:
    import adbc_driver_sqlite.dbapi as adbc

    with adbc.connect(f"file:{path}?mode=ro&immutable=1") as conn, conn.cursor() as cur:
        cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(1 << 16)})
        cur.execute(sql, parameters=params)
        return cur.fetch_arrow_table()


def _tasks(path: Path) -> list[tuple[str, tuple[int, int] | None]]:
    """(SQL, rowid bounds) per part, biggest tables first."""
    tasks: list[tuple[str, tuple[int, int] | None]] = []
    for table, columns in COLUMNS.items():
        sql = f'SELECT {columns} FROM "{table}"'
        if table not in SPLIT:
            tasks.append((sql, None))
            continue
        last = _adbc(path, f'SELECT max(rowid) AS n FROM "{table}"', None)["n"][0].as_py() or 0
        half = last // 2
        tasks += [(f"{sql} WHERE rowid > ? AND rowid <= ?", b) for b in ((0, half), (half, last))]
    return tasks


def _read_adbc(path: Path) -> int:
    """The ADBC SQLite driver, parts read in THREADS threads."""
    with ThreadPoolExecutor(THREADS) as pool:
        tables = list(pool.map(lambda task: _adbc(path, *task), _tasks(path)))
    return sum(t.num_rows for t in tables)


def _read_connectorx(path: Path) -> int:
    """connectorx, each large table split in THREADS partitions by rowid (its own threads)."""
    import connectorx as cx

    uri, rows = f"sqlite://{path.resolve()}", 0
    for table, columns in COLUMNS.items():
        if table in SPLIT:
            sql = f'SELECT rowid AS rid, {columns} FROM "{table}"'
            split: dict[str, Any] = {"partition_on": "rid", "partition_num": THREADS}
        else:
            sql, split = f'SELECT {columns} FROM "{table}"', {}
        rows += cx.read_sql(uri, sql, return_type="arrow", **split).num_rows
    return rows


READERS = {"adbc": _read_adbc, "connectorx": _read_connectorx}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("export", type=Path)
    parser.add_argument("--reader", choices=sorted(READERS), default="adbc")
    args = parser.parse_args()
    start = time.perf_counter()
    rows = READERS[args.reader](args.export)
    print(json.dumps({"rows": rows, "seconds": time.perf_counter() - start}))


if __name__ == "__main__":
    main()
