"""Several traces without GPU work at once (`nsysmap attribute r0.json r1.json`).

Each rank's time is then its CPU operators' self time: the rank table says
"CPU ms", not "GPU ms", and where the runs launched GPU work that the traces
do not hold (torch.profiler without ProfilerActivity.CUDA) the job's summary
and report say so, as a single trace's do (tests/test_unrecorded_gpu_work.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nsysmap.many.ranks_text import cpu_only, unrecorded_note
from tests.many_jobs import ranked_job
from tests.torch_traces import complete, launch, op, write_trace


def _trace(path: Path, launches: bool) -> Path:
    events = [complete("user_annotation", "forward", 0, 100)]
    events += [op("aten::mm", 2 + 10 * i, 8) for i in range(3)]
    events += [launch(3 + 10 * i, i + 1) for i in range(3)] if launches else []
    return write_trace(path, events, deviceProperties=[])


def _job(root: Path, launches: bool) -> dict[str, Any]:
    return ranked_job([_trace(root / f"r{r}.json", launches) for r in range(2)], root)


SAID = "the run launched GPU work (6 launch calls) that the trace does not hold"


@pytest.mark.slow
def test_traces_of_gpu_runs_without_their_gpu_work_are_said(tmp_path):
    job = _job(tmp_path, launches=True)
    assert cpu_only(job["manifest"])
    assert unrecorded_note(job["manifest"]) is not None
    assert "rank  ops  CPU ms  compute ms" in job["terminal"]
    assert "GPU ms" not in job["terminal"]
    assert f"  note: {SAID}" in job["terminal"]
    assert "| rank | ops | CPU ms | compute ms |" in job["markdown"]
    assert f"Note: {SAID}" in job["markdown"]


@pytest.mark.slow
def test_traces_of_cpu_runs_are_in_cpu_time_without_a_note(tmp_path):
    job = _job(tmp_path, launches=False)
    assert "CPU ms" in job["terminal"] and "GPU ms" not in job["terminal"]
    assert unrecorded_note(job["manifest"]) is None
    assert "launched GPU work" not in job["terminal"] + job["markdown"]


def test_a_gpu_report_among_them_keeps_gpu_time():
    cpu = {"status": "ok", "report_meta": {"unit_of_work": "cpu_op", "cuda_launch_calls": "4"}}
    gpu = {"status": "ok", "report_meta": {"unit_of_work": "gpu_op", "cuda_launch_calls": "9"}}
    failed = {"status": "failed"}
    assert cpu_only({"inputs": [cpu, cpu, failed]})
    assert not cpu_only({"inputs": [cpu, gpu]})
    assert not cpu_only({"inputs": []})
    assert unrecorded_note({"inputs": [cpu, gpu]}) is None
    assert "(8 launch calls)" in (unrecorded_note({"inputs": [cpu, cpu]}) or "")
