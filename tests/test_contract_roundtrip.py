"""The capture contract: what the launcher writes into the capture directory,
nsysmap reads back (instrument/contract.py is the one module both import)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import instrument
from instrument import contract
from instrument import launch as launcher
from instrument.contract import CompileRecord, LaunchRecord
from nsysmap.capture import profile_script as nsys_run
from nsysmap.flops import flops_document as flops_model

pytestmark = pytest.mark.torch  # imports torch (the training side)

SCRIPT = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
"""

text = st.text(max_size=12)
records = st.builds(
    LaunchRecord,
    backend=st.sampled_from(contract.BACKENDS),
    script=text,
    argv=st.lists(text, max_size=3),
    exit_status=st.integers(0, 255),
    exception=st.none() | text,
    interrupted=st.booleans(),
    steps_seen=st.integers(0, 10**6),
    profiled_steps=st.none() | st.tuples(st.integers(0, 100), st.integers(0, 100)).map(sorted),
    trace=st.sampled_from([None, contract.TRACE]),
    flops=st.sampled_from([None, contract.FLOPS]),
    compile=st.builds(CompileRecord, provenance=st.sampled_from([None, contract.COMPILED])),
    torch_version=text,
    cuda_device=st.none() | text,
    wall_s=st.floats(0, 1e6),
    notes=st.lists(text, max_size=3),
)


def test_nsysmap_reads_only_fields_the_record_has():
    assert set(nsys_run.LAUNCH_OPTIONS) <= set(contract.LAUNCH_FIELDS)
    assert {"exit_status", "interrupted", "profiled_steps", "trace", "cuda_device"} <= set(
        contract.LAUNCH_FIELDS
    )


@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=records)
def test_a_written_record_reads_back_unchanged(tmp_path: Path, record: LaunchRecord):
    contract.write_launch_record(tmp_path, record)
    read = nsys_run.read_launch_record(tmp_path)
    assert read == json.loads(json.dumps(record.to_json()))
    assert list(read) == list(contract.LAUNCH_FIELDS)
    assert list(read["compile"]) == [f.name for f in fields(CompileRecord)]
    assert nsys_run.script_status(read, child_status=-9) == record.exit_status
    steps = record.profiled_steps
    assert nsys_run.step_count(read["profiled_steps"]) == (
        None if steps is None else steps[1] - steps[0] + 1
    )


def test_a_missing_or_foreign_record_reads_as_empty(tmp_path: Path):
    assert nsys_run.read_launch_record(tmp_path) == {}
    (tmp_path / contract.LAUNCH_RECORD).write_text("[1, 2]")
    assert nsys_run.read_launch_record(tmp_path) == {}


def test_the_launchers_capture_directory_is_what_nsysmap_reads(tmp_path: Path):
    """A real launch (torch backend) into OUT/capture: every file nsysmap looks for is there."""
    script = tmp_path / "train_tiny.py"
    script.write_text(SCRIPT)
    capture = tmp_path / "out" / contract.CAPTURE_DIR
    status = launcher.main(
        ["--backend", "torch", "--out", str(capture), "--steps", "1", str(script)]
    )
    assert status == 0 and instrument.active() is None
    record = nsys_run.read_launch_record(capture)
    assert list(record) == list(contract.LAUNCH_FIELDS)
    assert LaunchRecord(**{**record, "compile": CompileRecord(**record["compile"])}).to_json() == (
        record
    )
    assert record["trace"] == contract.TRACE and record["flops"] == contract.FLOPS
    trace = nsys_run.find_capture("torch", capture, None, record)
    assert trace == capture / contract.TRACE and trace.is_file()
    assert nsys_run.step_count(record["profiled_steps"]) == 1
    doc = flops_model.read_document(capture / contract.FLOPS)
    assert doc is not None and doc["rows"]
    assert flops_model.load_flops(tmp_path / "out") is not None  # OUT/capture/flops.json
    assert record["compile"]["provenance"] is None  # nothing compiled: no compiled.json
    assert not (capture / contract.COMPILED).exists()
