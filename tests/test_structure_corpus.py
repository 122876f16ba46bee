"""The structure model on the real course-assignment exports, against plain SQL on the
export and against what the corpus catalogue says each holds (no option given)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nsysmap.flow.verbs import analyse_file
from nsysmap.report.build import build_report
from nsysmap.report.report_files import read_run
from tests.corpus import connect, corpus_path

pytestmark = pytest.mark.corpus

MEASUREMENT = "cs336a2_small_fwd_unranged_warmup_then_measurement_range_rtx5070laptop.sqlite"
NO_NVTX = "cs336a2_fwd_no_nvtx_a100.sqlite"
# Every GPU operation and the start of the API call that launched it.
LAUNCHED = """
    SELECT g.name, g.dur, g.is_gemm, r.start AS launched
    FROM (
        SELECT s.value AS name, k."end" - k.start AS dur, correlationId, globalPid,
               s.value LIKE '%gemm%' AS is_gemm
        FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
        UNION ALL
        SELECT '[CUDA memset]', "end" - start, correlationId, globalPid, 0
        FROM CUPTI_ACTIVITY_KIND_MEMSET
        UNION ALL
        SELECT '[CUDA memcpy]', "end" - start, correlationId, globalPid, 0
        FROM CUPTI_ACTIVITY_KIND_MEMCPY
    ) g
    JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
      ON r.correlationId = g.correlationId AND r.globalTid / 16777216 = g.globalPid / 16777216
"""


def _reported(name: str, out: Path) -> dict[str, Any]:
    analyse_file(corpus_path(name), out)
    return build_report(read_run(out)).answers


def test_the_measurement_range_holds_the_one_measured_forward_pass(tmp_path):
    """real3: set-up copies and a warm-up pass in no range, then `measurement` around the
    timed pass. Answered with no option: the kernel, its calls per pass and the matmul
    share are those of SQL over the operations launched inside `measurement`."""
    doc = _reported(MEASUREMENT, tmp_path)
    with connect(corpus_path(MEASUREMENT)) as conn:
        (start, end), *_ = conn.execute(
            "SELECT start, \"end\" FROM NVTX_EVENTS WHERE text = 'measurement'"
        ).fetchall()
        rows = conn.execute(
            f"SELECT name, count(*), sum(dur), sum(dur * is_gemm) FROM ({LAUNCHED}) "
            "WHERE launched BETWEEN ? AND ? GROUP BY name ORDER BY sum(dur) DESC",
            [start, end],
        ).fetchall()
        copies = conn.execute(
            'SELECT count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY'
        ).fetchone()
    kernels = [r for r in rows if not r[0].startswith(b"[CUDA")]
    total = sum(r[2] for r in rows)
    forward = doc["scopes"]["forward"]
    assert doc["run"]["forward_passes"] == 1
    assert forward["label"] == "1 forward pass inside `measurement`"
    assert (forward["ops"], forward["time_ns"]) == (sum(r[1] for r in rows), total)
    top = doc["answers"]["top_kernel"]["scopes"]["forward"]
    assert top["name"].encode() == kernels[0][0] and top["kind"] == "kernel"
    assert top["calls"] == top["calls_per_forward_pass"] == kernels[0][1] == 37
    share = doc["answers"]["matmul_share"]["scopes"]["forward"]["share"]
    assert share == pytest.approx(sum(r[3] for r in rows) / total)
    regions = {r["region"]: r for r in doc["structure"]["regions"]}
    assert regions["warmup"]["forward_passes"] == 1
    assert (
        (regions["setup"]["ops"], regions["setup"]["time_ns"]) == tuple(copies) == (112, 33324898)
    )
    left = {row["region"]: row["time_ns"] for row in doc["left_out"]}
    assert left["setup"] == copies[1]
    assert "whole capture" not in "\n".join(doc["structure"]["lines"])


def test_no_ranges_three_timed_passes_after_a_warm_up(tmp_path):
    """real: no NVTX at all; a warm-up pass, then three timed forward passes (the
    catalogue). The first pass, launched many times more slowly, is the warm-up."""
    doc = _reported(NO_NVTX, tmp_path)
    assert doc["run"]["forward_passes"] == 3
    regions = {r["region"]: r for r in doc["structure"]["regions"]}
    assert regions["warmup"]["forward_passes"] == 1
    assert regions["warmup"]["evidence"] == ["duration"]
    top = doc["answers"]["top_kernel"]["scopes"]["forward"]
    assert top["kind"] == "kernel"
    assert top["calls_per_forward_pass"] * 3 == top["forward_calls"] == top["calls"]
    with connect(corpus_path(NO_NVTX)) as conn:
        (calls,) = conn.execute(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
            "ON s.id = k.demangledName WHERE s.value = ?",
            [top["name"]],
        ).fetchone()
    assert calls == 4 * top["calls_per_forward_pass"]  # the warm-up pass runs it as often
