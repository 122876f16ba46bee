"""What an operation's time is, in the words every summary line uses.

A profile with GPU work has kernels and copies, timed on the GPU; a trace
without GPU work (`unit_of_work` "cpu_op" in the profile's meta) has CPU
operators, timed by their self time. The terminal summary, the structure
lines and the inferred-block lines name the unit alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TIME_UNITS = {False: "GPU time", True: "CPU operator self time"}
OPERATION_WORDS = {False: "kernels", True: "operators"}


def cpu_trace(meta: Mapping[str, Any]) -> bool:
    """Whether a profile's operations are CPU operators timed by their self time (a trace
    without GPU work: its reader's `unit_of_work` "cpu_op")."""
    return meta.get("unit_of_work") == "cpu_op"


def time_unit(cpu: bool) -> str:
    """ "GPU time", or "CPU operator self time" where `cpu` (a trace without GPU work)."""
    return TIME_UNITS[cpu]


def operation_word(cpu: bool, copies: bool = False) -> str:
    """ "kernels", or "operators" where `cpu` (a trace without GPU work); "operations"
    where what is counted holds copies or memsets too (`copies`: a repeated motif)."""
    return "operations" if copies and not cpu else OPERATION_WORDS[cpu]


def unrecorded_gpu_work(meta: Mapping[str, Any]) -> str | None:
    """Why a trace without GPU work timed only its CPU operators, where it launched GPU
    work that it does not hold (`cuda_launch_calls` with `unit_of_work` "cpu_op"):
    one sentence, without its full stop; None otherwise."""
    if not cpu_trace(meta):
        return None
    try:
        launches = int(meta.get("cuda_launch_calls") or 0)
    except (TypeError, ValueError):
        return None
    if launches <= 0:
        return None
    return (
        f"the run launched GPU work ({launches:,} launch calls) that the trace does not hold "
        "(its GPU activity was not recorded: profile with ProfilerActivity.CUDA to see it), "
        "so the times here are the CPU operators' self times, not the GPU's"
    )
