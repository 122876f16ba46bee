"""Synthetic exports in the Nsight Systems SQLite schema, for tests, samples
and benchmarks: a millisecond builder (`SynthExport`), a bulk writer, and
GPT-2-like training exports of any size (`gpt`, `tile`)."""

from devtools.synth.builder import SynthExport
from devtools.synth.bulk import (
    NS_PER_MS,
    Frame,
    bulk_tables,
    global_pid,
    global_tid,
    known_columns,
    write_export,
)

__all__ = [
    "NS_PER_MS",
    "Frame",
    "SynthExport",
    "bulk_tables",
    "global_pid",
    "global_tid",
    "known_columns",
    "write_export",
]
