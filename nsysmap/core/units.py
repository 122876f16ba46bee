"""What an operation's time is, in the words every summary line uses.

A profile with GPU work has kernels and copies, timed on the GPU; a trace
without GPU work (`unit_of_work` "cpu_op" in the profile's meta) has CPU
operators, timed by their self time. The terminal summary, the structure
lines and the inferred-block lines name the unit alike.
"""

from __future__ import annotations

TIME_UNITS = {False: "GPU time", True: "CPU operator self time"}
OPERATION_WORDS = {False: "kernels", True: "operators"}


def time_unit(cpu: bool) -> str:
    """ "GPU time", or "CPU operator self time" where `cpu` (a trace without GPU work)."""
    return TIME_UNITS[cpu]


def operation_word(cpu: bool) -> str:
    """ "kernels", or "operators" where `cpu` (a trace without GPU work)."""
    return OPERATION_WORDS[cpu]
