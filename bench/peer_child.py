"""Run by the peer environment's Python (.venv-peers), never by nsysmap's.

    python bench/peer_child.py hta TRACE_DIR    # HTA's parse and kernel breakdown
    python bench/peer_child.py duckdb-sqlite    # DuckDB's SQLite extension, from its wheel

Only the standard library and the peers' public APIs; prints one JSON line.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def hta(trace_dir: str) -> None:
    """TraceAnalysis on a folder holding the trace, then its GPU kernel breakdown."""
    from hta.trace_analysis import TraceAnalysis

    start = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=trace_dir)
    by_type, by_kernel = analysis.get_gpu_kernel_breakdown(visualize=False)
    seconds = time.perf_counter() - start
    if by_kernel.empty:
        sys.exit(f"HTA found no GPU kernels in {trace_dir}")
    print(json.dumps({"seconds": seconds, "kernel_types": len(by_type), "kernels": len(by_kernel)}))


def duckdb_sqlite() -> None:
    """Install DuckDB's SQLite extension from the duckdb-extension-sqlite-scanner wheel.

    nsys-ai reads exports through DuckDB's SQLite extension, which DuckDB
    downloads on first use; offline, nsys-ai falls back to a slower path. The
    wheel carries the extension, so installing it from there gives nsys-ai
    its normal path without a network.
    """
    import duckdb
    import duckdb_extension_sqlite_scanner

    folder = Path(duckdb_extension_sqlite_scanner.__file__).parent
    found = sorted(folder.glob("extensions/*/sqlite_scanner.duckdb_extension"))
    if not found:
        sys.exit(f"no sqlite_scanner extension in {folder}")
    duckdb.sql(f"INSTALL '{found[-1]}'")
    duckdb.sql("LOAD sqlite_scanner")
    print(json.dumps({"duckdb": duckdb.__version__, "extension": str(found[-1])}))


def main(argv: list[str]) -> None:
    if argv[:1] == ["hta"] and len(argv) == 2:
        hta(argv[1])
    elif argv == ["duckdb-sqlite"]:
        duckdb_sqlite()
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
