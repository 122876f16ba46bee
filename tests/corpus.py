"""Helpers for tests over the real profiles in ../shared/corpus/{nsys,real,real2,real3}.

The corpus lives next to the repository, not in it; tests that need it are
marked `corpus` and skip, with the reason shown, when it is absent.
`independent_gpu_totals` recomputes per-device totals with plain SQL so that
tests can check nsysmap against something that does not share its code.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

CORPUS = (Path(__file__).parents[1] / ".." / "shared" / "corpus" / "nsys").resolve()
CATALOGUE = CORPUS / "catalogue.json"
_ABSENT = f"the nsys export corpus is not at {CORPUS}"
# The second set: real profiles with users' own ranges (nsys exports and torch traces).
REAL = CORPUS.parent / "real"
REAL_CATALOGUE = REAL / "catalogue.json"
# The third set: real2 (MoE, B200, DDP ranks, warm-up/measure ranges, inputs without GPU work).
REAL2 = CORPUS.parent / "real2"
REAL2_CATALOGUE = REAL2 / "catalogue.json"
# The fourth set: real3 (an unranged warm-up before a `measurement` range, a newest-schema
# export; a WSL2 capture of launches without GPU records).
REAL3 = CORPUS.parent / "real3"
REAL3_CATALOGUE = REAL3 / "catalogue.json"
# Every folder of real profiles, in the order files are looked up.
FOLDERS = (CORPUS, REAL, REAL2, REAL3)

# Marker for corpus tests: `@needs_corpus` skips them when the corpus is absent.
needs_corpus = pytest.mark.skipif(not CATALOGUE.is_file(), reason=_ABSENT)
# The exports without GPU activity (NVTX only, or launches captured under WSL2).
NO_GPU_FILES = (
    "centerformer_baseline_pytorch_nvtx_only.sqlite",
    "centerformer_poolformer_trt_nvtx_only.sqlite",
    "qcu_mpi_python_wsl2_no_kernel_table.sqlite",
    "cs336a2_wsl2_torch_smoke_test_runtime_only_no_kernels_rtx4080laptop.sqlite",
)
_GPU_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",  # one row per CUDA graph replay traced whole
)


def catalogue() -> list[dict]:
    """The catalogue's per-file entries ([] when the corpus is absent)."""
    if not CATALOGUE.is_file():
        return []
    return json.loads(CATALOGUE.read_text())["files"]


def corpus_files() -> list[str]:
    """The file names the catalogue lists (a placeholder when it is absent)."""
    return [entry["file"] for entry in catalogue()] or ["<corpus absent>"]


def real_nsys_files() -> list[str]:
    """The nsys exports of the second set (../shared/corpus/real; a placeholder when absent)."""
    if not REAL_CATALOGUE.is_file():
        return ["<real corpus absent>"]
    entries = json.loads(REAL_CATALOGUE.read_text())
    return [entry["file"] for entry in entries if entry["format"] == "nsys-sqlite"]


def real3_nsys_files() -> list[str]:
    """The nsys exports of the fourth set (../shared/corpus/real3; none when absent)."""
    if not REAL3_CATALOGUE.is_file():
        return []
    entries = json.loads(REAL3_CATALOGUE.read_text())
    return [entry["file"] for entry in entries if entry["format"] == "nsys-sqlite"]


def real_profiles(fmt: str | None = None) -> list[str]:
    """Every profile of ../shared/corpus/real, real2 and real3 (`fmt`: "nsys-sqlite" or
    "kineto-json" only); a placeholder when all are absent."""
    names = []
    for catalogue_file in (REAL_CATALOGUE, REAL2_CATALOGUE, REAL3_CATALOGUE):
        if catalogue_file.is_file():
            entries = json.loads(catalogue_file.read_text())
            names += [e["file"] for e in entries if fmt is None or e["format"] == fmt]
    return names or ["<real corpus absent>"]


def all_export_files() -> list[str]:
    """Every real nsys export: the first corpus, then the second set, then the fourth."""
    return corpus_files() + real_nsys_files() + real3_nsys_files()


def corpus_path(name: str) -> Path:
    """The path of a file of either corpus; skips the test when it is absent."""
    for folder in FOLDERS:
        if (folder / name).is_file():
            return folder / name
    where = ", ".join(str(folder) for folder in FOLDERS)
    pytest.skip(_ABSENT if not CORPUS.is_dir() else f"{name} is not in the corpus at {where}")


def connect(path: Path) -> sqlite3.Connection:
    """A plain read-only sqlite3 connection that tolerates non-UTF-8 text."""
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    conn.text_factory = bytes
    return conn


def independent_gpu_totals(path: Path) -> dict[int, tuple[int, int]]:
    """device id -> (op count, sum of end - start in ns) over kernels, memcpys, memsets
    and CUDA graph replays.

    Plain SQL over the raw tables, independent of nsysmap's reader.
    """
    totals: dict[int, tuple[int, int]] = {}
    with connect(path) as conn:
        tables = {row[0].decode() for row in conn.execute("SELECT name FROM sqlite_master")}
        for table in _GPU_TABLES:
            if table not in tables:
                continue
            rows = conn.execute(
                f'SELECT deviceId, COUNT(*), SUM("end" - start) FROM {table} GROUP BY deviceId'
            )
            for device, count, total in rows:
                before = totals.get(device, (0, 0))
                totals[device] = (before[0] + count, before[1] + total)
    return totals
