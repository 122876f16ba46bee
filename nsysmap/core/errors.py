"""Errors nsysmap reports to its users, each with a documented exit code.

Every failure a user can cause (a wrong path, a file that is not a profile, a
training script that crashes) is raised as a subclass of `NsysmapError`. The
CLI prints `nsysmap: error: <message>` on one line and exits with the class's
code; the table lives in docs/cli.md.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    INTERNAL = 1  # a bug in nsysmap: the message says how to get the traceback
    USAGE = 2  # bad command-line options (click's own code)
    INPUT_NOT_FOUND = 3  # path missing or unreadable
    UNUSABLE_INPUT = 4  # not a profile nsysmap reads, damaged times, or not an nsysmap output
    NO_GPU_DATA = 5  # an export without the tables attribution needs
    TOOL_MISSING = 6  # nsys (or another required tool) not on PATH
    PROFILER_FAILED = 7  # the profiler ran but produced no usable capture
    SCRIPT_FAILED = 8  # used when a failed script's own status is unknown
    SOME_FAILED = 9  # several reports: some failed, the others' outputs were written
    OUTPUT_FAILED = 10  # the output path cannot be written (a file, read-only, too long, ...)
    TOTALS_MISMATCH = 11  # a run's own totals did not add up: nothing was written
    CLUSTER_FAILED = 12  # several reports: the Dask cluster could not be started or reached
    REGRESSION = 13  # nsysmap diff --fail-above: the step time or a row grew too much
    TOO_LARGE = 14  # the input needs more memory than the budget (--memory-gb) allows
    INTERRUPTED = 130  # Ctrl-C


class NsysmapError(Exception):
    """Base class: a one-line message and an exit code."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, exit_code: ExitCode | None = None) -> None:
        super().__init__(one_line(message))
        if exit_code is not None:
            self.exit_code = exit_code


class InputNotFound(NsysmapError):
    exit_code = ExitCode.INPUT_NOT_FOUND


class NotAProfile(NsysmapError):
    """The input is not a profile nsysmap reads: not SQLite, empty, truncated, not an
    Nsight Systems export, not a chrome trace, ..."""

    exit_code = ExitCode.UNUSABLE_INPUT


class DamagedTimes(NotAProfile):
    """A profile whose times cannot be right: operations without a usable duration,
    ranges or API calls that end before they start, a device's total past 2^63-1 ns."""


class NotAnOutput(NsysmapError):
    """A directory read as nsysmap's output (`nsysmap report`, `diff`, `export`) whose
    manifest or tables are not ones this nsysmap writes."""

    exit_code = ExitCode.UNUSABLE_INPUT


class InputTooLarge(NsysmapError):
    """The input would need more memory than the budget allows (a trace that inflates
    past what `--memory-gb` reads); refused before it takes that memory."""

    exit_code = ExitCode.TOO_LARGE


class NoGpuData(NsysmapError):
    exit_code = ExitCode.NO_GPU_DATA


class ToolMissing(NsysmapError):
    exit_code = ExitCode.TOOL_MISSING


class ProfilerFailed(NsysmapError):
    exit_code = ExitCode.PROFILER_FAILED


class SomeProfilesFailed(NsysmapError):
    """Of several profiles, some could not be attributed; the others' outputs exist."""

    exit_code = ExitCode.SOME_FAILED


class OutputFailed(NsysmapError):
    """The outputs cannot be written where asked; previous outputs there are untouched."""

    exit_code = ExitCode.OUTPUT_FAILED


class TotalsMismatch(NsysmapError):
    """A run's conservation check failed (a bug or an input nsysmap misread): nothing written."""

    exit_code = ExitCode.TOTALS_MISMATCH


class ScriptFailed(NsysmapError):
    """The profiled script exited non-zero; outputs for what was captured exist."""

    exit_code = ExitCode.SCRIPT_FAILED

    def __init__(self, message: str, *, status: int) -> None:
        code = ExitCode.INTERRUPTED if status in (130, -2) else ExitCode.SCRIPT_FAILED
        super().__init__(message, exit_code=code)
        self.status = status
        # A script's own non-zero status is passed through unchanged when it fits.
        self.process_exit = status if 0 < status < 256 else int(code)


MAX_MESSAGE = 400


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text` on one line: whitespace runs (newlines included) become one space; a text
    longer than `limit` loses its middle (a long path), keeping the reason at its end."""
    flat = " ".join(str(text).split())
    if len(flat) <= limit:
        return flat
    half = (limit - 1) // 2
    return flat[:half] + "…" + flat[len(flat) - (limit - 1 - half) :]


class ClusterFailed(NsysmapError):
    """The Dask cluster for several reports could not be started or reached."""

    exit_code = ExitCode.CLUSTER_FAILED


class Regression(NsysmapError):
    """`nsysmap diff --fail-above`: the second run is slower than the gate allows."""

    exit_code = ExitCode.REGRESSION
