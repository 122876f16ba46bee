"""Fuzzing the NVTX and CUDA runtime tables of an export, as hard as its GPU tables.

The mutations of tests/fuzz.py pick a table at random and touch ranges and
API calls mostly by chance; these aim at NVTX_EVENTS and
CUPTI_ACTIVITY_KIND_RUNTIME: swapped start and end, NULL names and ends,
nesting thousands deep, text where numbers belong, invalid UTF-8, NULL and
duplicated correlation ids. The GPU tables are left alone, so whatever the
outcome, a clean run must give every device exactly the operations and time
that plain SQL finds in them (`tests.corpus.independent_gpu_totals`).

Every case is every mutation of every base (`table_cases`); the mutation's
choices (which rows, which column, which value) are drawn from the case's seed.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from pathlib import Path

NVTX = "NVTX_EVENTS"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
# Exports with both tables: small ones, the real two-GPU one (19,118 ranges), and the
# newest export (nsys 2026.4, one range around a measured pass after an unranged warm-up).
TABLE_BASES = (
    "synthetic.sqlite",
    "nsys/extrap_concurrent_streams_nvtx_windows.sqlite",
    "nsys/dlprof_pytorch_small_cnn_rtx2070.sqlite",
    "nsys/fastvideo_training_mfu_h100x2_before.sqlite",
    "real3/cs336a2_small_fwd_unranged_warmup_then_measurement_range_rtx5070laptop.sqlite",
)
TEXTS = ("'abc'", "'12x'", "''", "'1e400'", "'-'", "'９'")  # the last: a full-width digit

Mutation = Callable[[sqlite3.Connection, random.Random], None]


def _rows(rng: random.Random) -> str:
    """A condition picking about half, a third, or a handful of the rows."""
    k = rng.choice([2, 3, 7, 50])
    return f"rowid % {k} = {rng.randrange(k)}"


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1].decode() for r in conn.execute(f'PRAGMA table_info("{table}")')]


def _swap(table: str) -> Mutation:
    """Start and end change places (SQLite reads the right sides from the old row)."""
    ranges = " AND eventType IN (59, 60)" if table == NVTX else ""
    return lambda conn, rng: conn.execute(
        f'UPDATE "{table}" SET start = "end", "end" = start '
        f'WHERE "end" IS NOT NULL{ranges} AND {_rows(rng)}'
    )


def _set(table: str, assignment: str) -> Mutation:
    return lambda conn, rng: conn.execute(f'UPDATE "{table}" SET {assignment} WHERE {_rows(rng)}')


def _extreme_times(table: str) -> Mutation:
    """A start or end far beyond any capture (2^62 ns), or before 1970."""

    def mutate(conn: sqlite3.Connection, rng: random.Random) -> None:
        column = rng.choice(["start", "end"])
        value = rng.choice([str((1 << 62) + 12345), "-1 - abs(random() % 1000000000)"])
        conn.execute(f'UPDATE "{table}" SET "{column}" = {value} WHERE {_rows(rng)}')

    return mutate


def _null_names(conn: sqlite3.Connection, rng: random.Random) -> None:
    named = [c for c in ("text", "textId") if c in _columns(conn, NVTX)]
    conn.execute(f"UPDATE {NVTX} SET {', '.join(f'{c} = NULL' for c in named)} WHERE {_rows(rng)}")


def _text_in(table: str, candidates: tuple[str, ...]) -> Mutation:
    def mutate(conn: sqlite3.Connection, rng: random.Random) -> None:
        present = [c for c in candidates if c in _columns(conn, table)]
        column, text = rng.choice(present), rng.choice(TEXTS)
        conn.execute(f'UPDATE "{table}" SET "{column}" = {text} WHERE {_rows(rng)}')

    return mutate


def _deep(conn: sqlite3.Connection, rng: random.Random) -> None:
    """Thousands of push/pop ranges nested inside each other on the thread of the first range."""
    first, last, tid = conn.execute(
        f'SELECT min(start), max(coalesce("end", start)), '
        f"(SELECT globalTid FROM {NVTX} WHERE eventType = 59 LIMIT 1) FROM {NVTX}"
    ).fetchone()
    if tid is None:
        return
    depth = rng.choice([2_000, 20_000])
    step = max(1, (last - first) // (2 * depth + 2))
    rows = [(first + i * step, last - i * step, tid, f"deep {i}") for i in range(depth)]
    conn.executemany(
        f'INSERT INTO {NVTX} (start, "end", eventType, globalTid, text) VALUES (?, ?, 59, ?, ?)',
        rows,
    )


def _duplicate_calls(conn: sqlite3.Connection, rng: random.Random) -> None:
    """Rows copied whole, or many calls given one correlation id."""
    if rng.random() < 0.5:
        conn.execute(f"INSERT INTO {RUNTIME} SELECT * FROM {RUNTIME} WHERE {_rows(rng)}")
    else:
        shared = f"(SELECT min(correlationId) FROM {RUNTIME})"
        conn.execute(f"UPDATE {RUNTIME} SET correlationId = {shared} WHERE {_rows(rng)}")


TABLE_MUTATIONS: dict[str, Mutation] = {
    "nvtx_swapped": _swap(NVTX),
    "nvtx_null_names": _null_names,
    "nvtx_null_end": _set(NVTX, '"end" = NULL'),
    "nvtx_deep_nesting": _deep,
    "nvtx_text_in_numbers": _text_in(
        NVTX, ("start", "end", "eventType", "globalTid", "textId", "domainId")
    ),
    "nvtx_invalid_utf8": _set(NVTX, "text = CAST(x'ff41fe42c3' AS TEXT)"),
    "nvtx_extreme_times": _extreme_times(NVTX),
    "nvtx_duplicate_rows": lambda conn, rng: conn.execute(
        f"INSERT INTO {NVTX} SELECT * FROM {NVTX} WHERE {_rows(rng)}"
    ),
    "runtime_null_correlation": _set(RUNTIME, "correlationId = NULL"),
    "runtime_swapped": _swap(RUNTIME),
    "runtime_duplicate_correlation": _duplicate_calls,
    "runtime_extreme_times": _extreme_times(RUNTIME),
    "runtime_text_in_numbers": _text_in(
        RUNTIME, ("start", "end", "correlationId", "globalTid", "nameId", "eventClass")
    ),
}


def mutate_tables(path: Path, kind: str, rng: random.Random) -> None:
    """Apply TABLE_MUTATIONS[kind] to the export at `path` (in place)."""
    conn = sqlite3.connect(path)
    conn.text_factory = bytes
    try:
        TABLE_MUTATIONS[kind](conn, rng)
        conn.commit()
    finally:
        conn.close()


def per_device_problem(out: Path, expected: dict[int, tuple[int, int]]) -> str | None:
    """How ops.parquet's per-device (ops, ns) differ from `expected`, plain SQL over the
    input (`tests.corpus.independent_gpu_totals`); None when they do not."""
    import polars as pl

    ops = pl.read_parquet(out / "ops.parquet")
    got = {
        device: (n, int(ns))
        for device, n, ns in ops.group_by("device_id")
        .agg(pl.len(), pl.col("dur_ns").cast(pl.Int128).sum())
        .iter_rows()
    }
    return None if got == expected else f"per device: ops.parquet {got}, the input {expected}"
