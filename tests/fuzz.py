"""Seeded fuzzing of `nsysmap attribute`: mutated exports and traces, each run checked.

A case is a base input (a small real export or trace from ../shared/corpus,
or a synthetic one) and one mutation, both drawn from a seeded generator, so
a case id names the same input on every machine. `run_case` writes the
mutated copy, runs the command in-process (`tests.cli_runner.nsysmap_cli`, stdout and
stderr captured) and checks the outcome:

* no traceback and no "internal error" in the output, and one line on stderr
  for every error exit;
* on exit 0, conservation against an independent sum: the GPU rows and the
  summed `end - start` of the raw tables (plain SQL), or of the trace's GPU
  events (decimal arithmetic), equal ops.parquet's rows and durations, and
  every summary table adds up to ops.parquet per device.

`run_cases` runs cases in worker processes with a time limit each.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import multiprocessing
import os
import random
import shutil
import sqlite3
import time
import zlib
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from nsysmap.core.errors import ExitCode
from tests.corpus import independent_gpu_totals
from tests.fuzz_tables import TABLE_BASES, TABLE_MUTATIONS, mutate_tables, per_device_problem

CORPUS = (Path(__file__).parents[1] / ".." / "shared" / "corpus").resolve()
# Small real inputs (under 1 MB): quick to mutate and to run.
CORPUS_EXPORTS = (
    "nsys/extrap_concurrent_streams_nvtx_windows.sqlite",
    "nsys/torch_minimal_zeros_sum_rtx3080.sqlite",
    "nsys/dlprof_pytorch_small_cnn_rtx2070.sqlite",
    "nsys/vecadd_streams_t4_gpu4.sqlite",
    "real3/cs336a2_small_fwd_unranged_warmup_then_measurement_range_rtx5070laptop.sqlite",
)
CORPUS_TRACES = (
    "real/tracelens_bert_small_infer_modules_h100.json.gz",
    "real/tracelens_vit_nsfw_infer_modules_h100.json.gz",
)
GPU_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
)
TIMED = ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
READ_TABLES = (*GPU_TABLES, *TIMED, "StringIds")
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")
CASE_LIMIT_S = 60.0

SQLITE_MUTATIONS = (
    "truncate", "bit_flips", "drop_table", "rename_table", "rename_column", "case_rename",
    "nulls", "negative_times", "huge_times", "text_in_integers", "duplicate_rows",
    "invalid_utf8", "dangling_string_ids", "unbalanced_ranges", "end_before_start",
    "sparse_rowids", "long_names",
)  # fmt: skip
TRACE_MUTATIONS = (
    "truncate", "bit_flips", "ts_string", "dur_string", "args_wrong_type", "no_args",
    "null_ts", "mixed_ids", "huge_numbers", "deep_nesting", "invalid_utf8", "duplicate_events",
    "negative_dur", "name_bytes", "lone_surrogates", "shared_correlation", "gzip_members",
)  # fmt: skip
MISUSE = ("fifo", "directory", "output_is_file", "output_under_file", "output_too_long")
# Exit codes a case may end with (docs/cli.md): never 1 (a bug) nor 11 (totals that do not
# add up: an input misread).
DOCUMENTED_EXITS = {int(code) for code in ExitCode} - {ExitCode.INTERNAL, ExitCode.TOTALS_MISMATCH}


@dataclass(frozen=True)
class Case:
    """One fuzz case: a base input, a mutation, and the seed of the mutation's choices."""

    id: str
    base: str  # a corpus path relative to CORPUS, or "synthetic.sqlite" / "synthetic.json"
    mutation: str
    seed: int

    @property
    def is_trace(self) -> bool:
        return self.base.endswith((".json", ".json.gz"))


def bases(*, every_file: bool = False) -> list[str]:
    """The base inputs at hand: the synthetic ones and the small corpus files present
    (with `every_file`, every export and trace of the corpus)."""
    if every_file:  # every folder: nsys, real, real2, real3, ...
        traces = [p for p in CORPUS.glob("*/*.json") if p.name != "catalogue.json"]
        found = sorted(CORPUS.glob("*/*.sqlite")) + sorted(CORPUS.glob("*/*.json.gz"))
        present = [str(p.relative_to(CORPUS)) for p in [*found, *sorted(traces)]]
    else:
        present = [n for n in (*CORPUS_EXPORTS, *CORPUS_TRACES) if (CORPUS / n).is_file()]
    return ["synthetic.sqlite", "synthetic.json", *present]


def cases(seed: int, count: int, *, every_file: bool = False) -> list[Case]:
    """`count` cases drawn by `seed`; misuse cases come first, once each."""
    rng = random.Random(seed)
    out = [Case(f"misuse-{m}", "synthetic.sqlite", m, seed) for m in MISUSE]
    pool = bases(every_file=every_file)
    for i in range(max(0, count - len(out))):
        base = rng.choice(pool)
        kinds = TRACE_MUTATIONS if base.endswith((".json", ".json.gz")) else SQLITE_MUTATIONS
        mutation = rng.choice(kinds)
        stem = Path(base).name.split(".")[0][:24]
        out.append(
            Case(f"{seed}-{i:03d}-{stem}-{mutation}", base, mutation, rng.randrange(1 << 30))
        )
    return out


def table_cases(seed: int, *, every_file: bool = False) -> list[Case]:
    """Every NVTX and runtime mutation (tests/fuzz_tables.py) of every base at hand (with
    `every_file`, of every export of every corpus folder that has both tables)."""
    rng = random.Random(seed)
    present = [b for b in TABLE_BASES if b == "synthetic.sqlite" or (CORPUS / b).is_file()]
    if every_file:
        found = [p for p in sorted(CORPUS.glob("*/*.sqlite")) if _has_both_tables(p)]
        present = ["synthetic.sqlite", *(str(p.relative_to(CORPUS)) for p in found)]
    return [
        Case(f"tables-{Path(base).stem[:24]}-{kind}", base, kind, rng.randrange(1 << 30))
        for base in present
        for kind in TABLE_MUTATIONS
    ]


def _has_both_tables(path: Path) -> bool:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()
    return {"NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME"} <= names


# ------------------------------------------------------------------ base inputs
def synthetic_export(path: Path) -> Path:
    """A two-device training step with phases, modules, an open range and all op kinds."""
    from devtools.synth import SynthExport

    b = SynthExport()
    b.thread(10, 11, "python")
    b.thread(10, 12, "autograd")
    b.range(10, 11, 0, 20, "nsysmap:step:0")
    b.range(10, 11, 0, 8, "nsysmap:phase:forward")
    b.range(10, 11, 1, 6, "nsysmap:fwd:Linear:fc1")
    b.range(10, 11, 9, 18, "nsysmap:phase:backward")
    b.range(10, 12, 10, 16, "nsysmap:bwd:Linear:fc1")
    b.range(10, 11, 2, 30, "async window", event_type=60)
    b.range(10, 11, 19, None, "left open")
    for i, (tid, at, device) in enumerate([(11, 2, 0), (11, 4, 1), (12, 11, 0), (12, 13, 1)]):
        b.launch(10, tid, at, at + 0.5, corr=i + 1)
        b.kernel(10, device, 7, at + 1, at + 2, corr=i + 1, name=f"void gemm_{i}<float>(int)")
    b.launch(10, 11, 5, 5.5, corr=9, api="cudaMemcpyAsync_v3020")
    b.memcpy(10, 0, 7, 6, 7, corr=9)
    b.launch(10, 11, 15, 15.5, corr=10, api="cudaMemsetAsync_v3020")
    b.memset(10, 1, 7, 16, 17, corr=10)
    b.gpu(0, "NVIDIA A100-SXM4-80GB")
    return b.write(path)


def synthetic_trace(path: Path) -> Path:
    from tests.test_torch_trace import CUDA_TRACE

    path.write_text(json.dumps(CUDA_TRACE))
    return path


def materialise(case: Case, workdir: Path) -> tuple[list[str], Path]:
    """Write the case's input into `workdir`; returns the command's arguments and output dir."""
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / "out"
    name = Path(case.base).name
    target = workdir / name
    if case.base == "synthetic.sqlite":
        synthetic_export(target)
    elif case.base == "synthetic.json":
        synthetic_trace(target)
    else:
        shutil.copyfile(CORPUS / case.base, target)
    rng = random.Random(case.seed)
    if case.mutation in MISUSE:
        return _misuse(case.mutation, target, out)
    if case.is_trace:
        _mutate_trace(target, case.mutation, rng)
    elif case.mutation in TABLE_MUTATIONS:
        mutate_tables(target, case.mutation, rng)
    else:
        _mutate_sqlite(target, case.mutation, rng)
    return ["attribute", str(target), "-o", str(out), "--quiet"], out


def _misuse(kind: str, target: Path, out: Path) -> tuple[list[str], Path]:
    if kind == "fifo":
        fifo = target.with_name("pipe.sqlite")
        os.mkfifo(fifo)
        return ["attribute", str(fifo), "-o", str(out)], out
    if kind == "directory":  # a directory is several reports: one with none in it
        empty = target.with_name("no_reports_here")
        empty.mkdir()
        return ["attribute", str(empty), "-o", str(out)], out
    blocker = target.with_name("a_file")
    blocker.write_text("not a directory\n")
    bad = {
        "output_is_file": blocker,
        "output_under_file": blocker / "out",
        "output_too_long": target.parent / ("x" * 300) / "out",
    }[kind]
    return ["attribute", str(target), "-o", str(bad)], bad


# -------------------------------------------------------------- SQLite mutations
def _mutate_sqlite(path: Path, kind: str, rng: random.Random) -> None:
    if kind in ("truncate", "bit_flips"):
        _mutate_bytes(path, kind, rng)
        return
    conn = sqlite3.connect(path)
    conn.text_factory = bytes
    try:
        tables = [
            r[0].decode() for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        ]
        present = [t for t in READ_TABLES if t in tables] or tables
        table = rng.choice(present)
        columns = [r[1].decode() for r in conn.execute(f'PRAGMA table_info("{table}")')]
        column = rng.choice(columns)
        # Tables with start and end: GPU activity first (exports without it: API calls, NVTX).
        timed = [t for t in GPU_TABLES if t in tables] or [t for t in TIMED if t in tables]
        try:
            _SQL_MUTATIONS[kind](conn, rng, table, column, rng.choice(timed or [table]))
        except sqlite3.Error:  # the input lacks what this mutation changes: it runs unchanged
            conn.rollback()
        conn.commit()
    finally:
        conn.close()


def _rows(rng: random.Random) -> str:
    """A WHERE clause picking about a third of the rows, or a handful."""
    k = rng.choice([2, 3, 7, 50])
    return f"WHERE rowid % {k} = {rng.randrange(k)}"


def _sql(statement: str):
    return lambda conn, rng, table, column, gpu: conn.execute(
        statement.format(table=table, column=column, gpu=gpu, rows=_rows(rng))
    )


def _case_rename(conn, rng, table, column, gpu) -> None:
    if rng.random() < 0.7:
        new = column.upper() if column != column.upper() else column.lower()
        conn.execute(f'ALTER TABLE "{table}" RENAME COLUMN "{column}" TO "{new}"')
    else:
        conn.execute(f'ALTER TABLE "{table}" RENAME TO "{table.lower()}_tmp"')
        conn.execute(f'ALTER TABLE "{table.lower()}_tmp" RENAME TO "{table.upper()}"')


def _times(value: str):
    return lambda conn, rng, table, column, gpu: conn.execute(
        f'UPDATE "{gpu}" SET "{rng.choice(["start", "end"])}" = {value} {_rows(rng)}'
    )


def _integers_as_text(conn, rng, table, column, gpu) -> None:
    target = rng.choice([gpu, gpu, table])
    names = [r[1] for r in conn.execute(f'PRAGMA table_info("{target}")')]
    ints = [
        n.decode()
        for n in names
        if n.decode()
        in (
            "start",
            "end",
            "deviceId",
            "correlationId",
            "globalPid",
            "globalTid",
            "nameId",
            "textId",
            "streamId",
        )
    ]
    name = rng.choice(ints or [n.decode() for n in names])
    text = rng.choice(["'abc'", "'12x'", "''", "'1e400'", "'-'"])
    conn.execute(f'UPDATE "{target}" SET "{name}" = {text} {_rows(rng)}')


def _nulls(conn, rng, table, column, gpu) -> None:
    try:
        conn.execute(f'UPDATE "{table}" SET "{column}" = NULL {_rows(rng)}')
    except sqlite3.IntegrityError:  # NOT NULL: rebuild without the constraint is overkill
        conn.execute(f'UPDATE "{gpu}" SET "correlationId" = NULL {_rows(rng)}')


def _dangling(conn: sqlite3.Connection, rng: random.Random, table: str) -> None:
    """Point string ids (names of kernels, API calls, ranges) at strings that do not exist."""
    for target in (table, *GPU_TABLES, "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
        names = [r[1].decode() for r in conn.execute(f'PRAGMA table_info("{target}")')]
        ids = [n for n in ("demangledName", "shortName", "nameId", "textId") if n in names]
        if ids:
            conn.execute(f'UPDATE "{target}" SET "{rng.choice(ids)}" = 999999999 {_rows(rng)}')
            return


def _unbalanced(conn, rng, table, column, gpu) -> None:
    if "NVTX_EVENTS" not in [r[0].decode() for r in conn.execute("SELECT name FROM sqlite_master")]:
        return
    first = rng.choice([10, 100, 1000, 5000])
    conn.execute(
        f"UPDATE NVTX_EVENTS SET end = NULL WHERE rowid IN (SELECT rowid FROM NVTX_EVENTS "
        f"WHERE eventType IN (59, 60) ORDER BY rowid LIMIT {first})"
    )


_SQL_MUTATIONS: dict[str, Any] = {
    "drop_table": _sql('DROP TABLE "{table}"'),
    "rename_table": _sql('ALTER TABLE "{table}" RENAME TO "{table}_renamed"'),
    "rename_column": _sql('ALTER TABLE "{table}" RENAME COLUMN "{column}" TO "{column}_x"'),
    "case_rename": _case_rename,
    "nulls": _nulls,
    "negative_times": _times("-1 - abs(random() % 1000000000)"),
    "huge_times": _times(str((1 << 62) + 12345)),
    "text_in_integers": _integers_as_text,
    "duplicate_rows": _sql('INSERT INTO "{gpu}" SELECT * FROM "{gpu}" {rows}'),
    "invalid_utf8": _sql("UPDATE StringIds SET value = CAST(x'ff41fe42c3' AS TEXT) {rows}"),
    "dangling_string_ids": lambda conn, rng, table, column, gpu: _dangling(conn, rng, table),
    "unbalanced_ranges": _unbalanced,
    "end_before_start": _sql('UPDATE "{gpu}" SET "end" = start - 1000 {rows}'),
    "sparse_rowids": lambda conn, rng, table, column, gpu: _sparse_rowids(conn, rng, gpu),
    "long_names": lambda conn, rng, table, column, gpu: _long_names(conn, rng),
}


def _sparse_rowids(conn: sqlite3.Connection, rng: random.Random, gpu: str) -> None:
    """Rows of the GPU table, or of NVTX or the runtime table, moved to rowids far apart:
    2^40 and beyond, and below zero (SQLite allows any 64-bit rowid)."""
    tables = [r[0].decode() for r in conn.execute("SELECT name FROM sqlite_master")]
    for table in [gpu, *(t for t in TIMED if t in tables)]:
        rowids = [r[0] for r in conn.execute(f'SELECT rowid FROM "{table}" ORDER BY rowid')]
        for i, rowid in enumerate(rng.sample(rowids, min(len(rowids), rng.choice([1, 2, 5])))):
            far = rng.choice([2**40 + i, -(2**35) - i, 2**62 + i])
            conn.execute(f'UPDATE "{table}" SET rowid = ? WHERE rowid = ?', (far, rowid))


def _long_names(conn: sqlite3.Connection, rng: random.Random) -> None:
    """A few strings (kernel, API and range names) made a megabyte or more long."""
    ids = [r[0] for r in conn.execute("SELECT id FROM StringIds ORDER BY id")]
    tail = "x" * rng.choice([1 << 20, 3 << 20])
    for string_id in rng.sample(ids, min(len(ids), 3)):
        conn.execute("UPDATE StringIds SET value = value || ? WHERE id = ?", (tail, string_id))


def _mutate_bytes(path: Path, kind: str, rng: random.Random) -> None:
    data = bytearray(path.read_bytes())
    if kind == "truncate":
        data = data[: rng.randrange(0, max(1, len(data)))]
    else:
        for _ in range(rng.choice([1, 4, 32, 256])):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))


# --------------------------------------------------------------- trace mutations
def _load_trace(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _mutate_trace(path: Path, kind: str, rng: random.Random) -> None:
    if kind in ("truncate", "bit_flips"):
        _mutate_bytes(path, kind, rng)
        return
    doc = _load_trace(path)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    picked = [e for e in events if isinstance(e, dict) and rng.random() < 0.3] or events[:1]
    text = None
    for e in picked:
        _TRACE_EDITS[kind](e, rng)
    if kind == "duplicate_events":
        events.extend(dict(e) for e in picked)
    if kind == "deep_nesting":
        depth = rng.choice([2000, 50_000])
        text = json.dumps(doc)[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}"
    if kind == "invalid_utf8":
        body = json.dumps(doc, ensure_ascii=False).encode()
        path.write_bytes(body.replace(b"aten::", b"aten\xff\xfe::", 3))
        return
    if kind == "name_bytes":  # bytes that are not UTF-8 in names (Kineto writes names raw)
        bad = rng.choice([b"\xff", b"caf\xe9", b"\xe2\x82", b"\xed\xa0\x80"])
        path.write_bytes(json.dumps(doc).encode().replace(_MARK.encode(), bad))
        return
    body = (text or json.dumps(doc)).encode()
    if kind == "gzip_members":  # several gzip members, as `cat a.gz b.gz` writes, and padding
        cuts = sorted(rng.sample(range(1, len(body)), min(len(body) - 1, rng.choice([1, 3]))))
        parts = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
        body = b"".join(gzip.compress(part, mtime=0) for part in parts) + b"\x00" * 8
    path.write_bytes(body)


def _set(field: str, values: list[Any]):
    return lambda e, rng: e.__setitem__(field, rng.choice(values))


def _put(e: dict[str, Any], rng: random.Random, fields: list[str], values: list[Any]) -> None:
    e[rng.choice(fields)] = rng.choice(values)


_MARK = "@@NAME-BYTES@@"


def _renamed(suffix: str):
    def edit(e: dict[str, Any], rng: random.Random) -> None:
        if isinstance(e.get("name"), str):
            e["name"] += suffix

    return edit


def _share_correlation(e: dict[str, Any], rng: random.Random) -> None:
    """Launch calls given one correlation id (the case read as "no launch record")."""
    args = e.get("args")
    if str(e.get("cat", "")).lower() in ("cuda_runtime", "cuda_driver") and isinstance(args, dict):
        args["correlation"] = 1


_TRACE_EDITS: dict[str, Any] = {
    "ts_string": _set("ts", ["12.5us", "abc", "", "1,000"]),
    "dur_string": _set("dur", ["3.0", "long", None, "1e3"]),
    "args_wrong_type": _set("args", [7, "text", [1, 2], True, None]),
    "no_args": lambda e, rng: e.pop("args", None),
    "null_ts": _set("ts", [None]),
    "mixed_ids": lambda e, rng: _put(e, rng, ["pid", "tid"], ["x7", 7.5, None, [1]]),
    "huge_numbers": lambda e, rng: _put(e, rng, ["ts", "dur"], [2**70, 1e303, -(2**64)]),
    "deep_nesting": lambda e, rng: None,
    "invalid_utf8": lambda e, rng: None,
    "duplicate_events": lambda e, rng: None,
    "negative_dur": _set("dur", [-5, -0.001, -1e9]),
    "name_bytes": _renamed(_MARK),
    "lone_surrogates": _renamed("\ud800x\udfff"),
    "shared_correlation": _share_correlation,
    "gzip_members": lambda e, rng: None,
}  # fmt: skip


# ----------------------------------------------------------------------- checks
def sqlite_totals(path: Path) -> tuple[int, int] | None:
    """(rows, summed end - start) over the GPU tables by plain SQL; None when unknowable."""
    rows = total = 0
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        conn.text_factory = bytes
        names = {
            r[0].decode().lower(): r[0].decode()
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        for table in GPU_TABLES:
            if table.lower() not in names:
                continue
            span = 'CAST("end" AS INTEGER) - CAST(start AS INTEGER)'
            query = f'SELECT count(*), sum({span}) FROM "{names[table.lower()]}"'
            n, s = conn.execute(query).fetchone()
            rows, total = rows + n, total + (s or 0)
        conn.close()
    except (sqlite3.Error, UnicodeDecodeError):  # (an error message of bytes not UTF-8)
        return None
    return rows, total


def trace_totals(path: Path) -> tuple[int, int, int] | None:
    """GPU events a reader can keep, their summed duration in ns, and how many it cannot.

    Decimal arithmetic, independent of nsysmap: an event is readable when its
    `ts` and `dur` are finite numbers (or decimal text) of sane size, `dur` is
    not negative, and it has a `pid` and a `tid`. None: no GPU events at all.
    """
    try:
        doc = _load_trace(path)
    except (OSError, EOFError, ValueError, RecursionError, zlib.error):
        return None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    gpu = [
        e
        for e in events or []
        if isinstance(e, dict)
        and e.get("ph") == "X"
        and str(e.get("cat", "")).lower() in GPU_CATEGORIES
    ]
    if not gpu:
        return None
    durations = [d for d in map(_readable_dur, gpu) if d is not None]
    return len(durations), sum(durations), len(gpu) - len(durations)


def _readable_dur(event: dict[str, Any]) -> int | None:
    """The event's duration in ns, or None when a reader must skip the event."""
    ts, dur = _decimal(event.get("ts")), _decimal(event.get("dur"))
    if ts is None or dur is None or dur < 0 or event.get("pid") is None:
        return None
    return None if event.get("tid") is None else int((dur * 1000).to_integral_value())


def _decimal(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = Decimal(value) if isinstance(value, int) else Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() and abs(number) < 9 * 10**15 else None


def conservation(out: Path, independent: tuple[int, ...] | None) -> str | None:
    """What does not add up in the outputs at `out` (None when everything does)."""
    import polars as pl

    manifest = json.loads((out / "manifest.json").read_text())
    ops = pl.read_parquet(out / "ops.parquet")
    if independent is not None:
        rows, total = independent[:2]
        if len(independent) == 3:  # a trace: the unreadable events are skipped, and counted
            said = int(manifest.get("report_meta", {}).get("gpu_events_skipped") or 0)
            if said != independent[2]:
                return f"{said} GPU events said skipped, {independent[2]} unreadable"
        got = (ops.height, int(ops["dur_ns"].cast(pl.Int128).sum() or 0))
        slack = rows if total and rows else 0  # trace times round to the nanosecond per event
        if got[0] != rows or abs(got[1] - total) > slack:
            return f"ops.parquet holds {got} (rows, ns), the input {independent}"
    per_device = ops.group_by("device_id").agg(
        pl.len().alias("n"), pl.col("dur_ns").cast(pl.Int128).sum()
    )
    for name, info in manifest["tables"].items():
        if name in ("ops", "flops", "structure"):  # structure: rows of three kinds, no partition
            continue
        table = pl.read_parquet(out / info["file"])
        if "device_id" not in table.columns or "time_ns" not in table.columns:
            continue
        sums = table.group_by("device_id").agg(
            pl.col("ops").sum().alias("n"), pl.col("time_ns").cast(pl.Int128).sum().alias("dur_ns")
        )
        joined = per_device.join(sums, on="device_id", how="full", nulls_equal=True, suffix="_t")
        bad = joined.filter(
            (pl.col("n") != pl.col("n_t")) | (pl.col("dur_ns") != pl.col("dur_ns_t"))
        )
        if bad.height or joined.filter(pl.col("n").is_null() | pl.col("n_t").is_null()).height:
            return f"{name} does not add up to ops.parquet per device"
    return None


def run_case(case: Case, workdir: Path) -> dict[str, Any]:
    """Materialise and run one case in this process; the outcome as a plain dict."""
    from tests.cli_runner import nsysmap_cli

    argv, out = materialise(case, workdir)
    source = Path(argv[1])
    independent, per_device = None, None
    if case.mutation not in MISUSE:
        independent = trace_totals(source) if case.is_trace else sqlite_totals(source)
    if case.mutation in TABLE_MUTATIONS:  # the GPU tables are intact: SQL sums them per device
        per_device = independent_gpu_totals(source)
    stdout, stderr = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            code = nsysmap_cli(argv)
        except BaseException as exc:
            code, _ = -1, stderr.write(f"Traceback (escaped): {type(exc).__name__}: {exc}\n")
    seconds = time.perf_counter() - start
    result = {
        "id": case.id,
        "code": int(code),
        "seconds": seconds,
        "stdout": stdout.getvalue(),
        "stderr": stderr.getvalue(),
    }
    if code == 0:
        result["conservation"] = conservation(out, independent) or (
            per_device_problem(out, per_device) if per_device is not None else None
        )
    shutil.rmtree(workdir, ignore_errors=True)
    return result


def problems(result: dict[str, Any]) -> list[str]:
    """Everything wrong with one case's outcome."""
    found = []
    text = result["stdout"] + result["stderr"]
    if "Traceback" in text:
        found.append("traceback")
    if "internal error" in text:
        found.append("internal error: " + result["stderr"].strip()[:300])
    if result["code"] is not None and result["code"] not in DOCUMENTED_EXITS:
        found.append(f"exit {result['code']}: {result['stderr'].strip()[:300]}")
    if result["code"] not in (0, None) and len(result["stderr"].strip().splitlines()) != 1:
        found.append(f"not one line on stderr: {result['stderr'][:300]!r}")
    if result.get("timed_out"):
        found.append(f"ran over {CASE_LIMIT_S:.0f} s")
    if result.get("harness"):
        found.append("the fuzz harness failed: " + result["harness"])
    if (result.get("seconds") or 0.0) > CASE_LIMIT_S:
        found.append(f"took {result['seconds']:.0f} s, over {CASE_LIMIT_S:.0f} s")
    if result.get("conservation"):
        found.append("conservation: " + result["conservation"])
    return found


def _worker(args: tuple[Case, str]) -> dict[str, Any]:
    case, root = args
    try:
        return run_case(case, Path(root) / case.id)
    except Exception as exc:  # the harness itself failed: report it as the case's problem
        return {"id": case.id, "code": None, "stdout": "", "stderr": "", "harness": repr(exc)}


def run_cases(selected: list[Case], root: Path, workers: int = 2) -> dict[str, dict[str, Any]]:
    """Run `selected` in `workers` processes, each case within CASE_LIMIT_S; results by id."""
    results: dict[str, dict[str, Any]] = {}
    todo = list(selected)
    context = multiprocessing.get_context("spawn")
    while todo:
        with context.Pool(workers, maxtasksperchild=40) as pool:
            pending = [(c, pool.apply_async(_worker, ((c, str(root)),))) for c in todo]
            todo = []
            for i, (case, handle) in enumerate(pending):
                try:
                    results[case.id] = handle.get(
                        timeout=CASE_LIMIT_S * (2 if i < workers else 1.5)
                    )
                except multiprocessing.TimeoutError:
                    results[case.id] = {
                        "id": case.id,
                        "code": None,
                        "timed_out": True,
                        "stdout": "",
                        "stderr": "",
                    }
                    todo = [c for c, h in pending[i + 1 :] if not h.ready()]
                    results.update({c.id: h.get() for c, h in pending[i + 1 :] if h.ready()})
                    pool.terminate()
                    break
    return results
