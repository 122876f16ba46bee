"""A GPU run traced without its GPU activity: the launch calls are there, the kernels not.

torch.profiler without ProfilerActivity.CUDA (zoology in the corpus: 1,206 CPU
operators, 260 launch calls, no kernel) is read by the CPU backend, whose times
are the operators' self times. The terminal summary and the report say that the
run's GPU work is missing from the trace, so that its times and TFLOP/s are not
read as the GPU's; a trace of a run on the CPU says nothing of the kind.
"""

from __future__ import annotations

from pathlib import Path

from nsysmap.core.units import unrecorded_gpu_work
from nsysmap.flow.verbs import analyse, load_profile, write
from nsysmap.report.build import build_report
from nsysmap.report.report_files import read_run
from tests.torch_traces import complete, launch, op, write_trace

SAID = "the run launched GPU work (3 launch calls) that the trace does not hold"


def _trace(path: Path, launches: bool, shapes: bool = False) -> Path:
    dims = {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}
    events = [complete("user_annotation", "forward", 0, 100)]
    events += [op("aten::mm", 2 + 10 * i, 8, **(dims if shapes else {})) for i in range(3)]
    if launches:  # two runtime launches and a driver one (a Triton kernel's)
        events += [launch(3, 1), launch(13, 2), launch(23, 3, api="cuLaunchKernel")]
    return write_trace(path, events, deviceProperties=[])


def _said(tmp_path: Path, launches: bool, shapes: bool = False) -> tuple[dict, str, str]:
    analysis = analyse(load_profile(_trace(tmp_path / "trace.json", launches, shapes)))
    meta = dict(zip(analysis.profile.meta["key"], analysis.profile.meta["value"], strict=True))
    write(analysis, tmp_path / "out")
    report = build_report(read_run(tmp_path / "out")).markdown
    return meta, analysis.summary_text, report


def test_launches_without_kernels_are_said_in_the_summary_and_the_report(tmp_path):
    meta, summary, report = _said(tmp_path, launches=True)
    assert meta["unit_of_work"] == "cpu_op"
    assert meta["cuda_launch_calls"] == "3"
    assert f"\nNote: {SAID}" in summary
    assert "ProfilerActivity.CUDA" in summary
    assert f"- The{SAID.removeprefix('the')}" in report
    assert "TFLOP/s are of CPU time" not in report  # no FLOPs: no rate to qualify


def test_with_flops_the_report_says_their_rate_is_of_cpu_time(tmp_path):
    _, _, report = _said(tmp_path, launches=True, shapes=True)
    assert "TFLOP/s are of CPU time." in report
    assert "No FLOPs" not in report


def test_a_run_on_the_cpu_says_nothing_of_gpu_work(tmp_path):
    meta, summary, report = _said(tmp_path, launches=False)
    assert meta["cuda_launch_calls"] == "0"
    assert "launched GPU work" not in summary
    assert "launched GPU work" not in report


def test_only_a_trace_without_gpu_work_and_with_launches_is_named():
    assert unrecorded_gpu_work({"unit_of_work": "gpu_op", "cuda_launch_calls": "5"}) is None
    assert unrecorded_gpu_work({"unit_of_work": "cpu_op", "cuda_launch_calls": "0"}) is None
    assert unrecorded_gpu_work({"unit_of_work": "cpu_op", "cuda_launch_calls": "x"}) is None
    said = unrecorded_gpu_work({"unit_of_work": "cpu_op", "cuda_launch_calls": "1200"})
    assert said is not None and "(1,200 launch calls)" in said
