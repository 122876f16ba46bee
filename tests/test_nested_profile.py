"""A reader's Profile and the NestedProfile attribution takes are two types.

`normalise` is the only step that nests ranges; a report straight from a
reader has none, and both type checking (mypy) and the NestedProfile itself
refuse it where nested ranges are needed.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from nsysmap.attribution.attribute import attribute
from nsysmap.attribution.normalise import normalise
from nsysmap.core import schemas
from nsysmap.core.profile import NestedProfile, Profile, meta_frame
from tests.frames import MS, Frames

ROOT = Path(__file__).resolve().parents[1]


def _read_form() -> Profile:
    """A report as a reader returns it: two ranges, one inside the other, nesting empty."""
    ranges = pl.DataFrame(
        [
            dict(range_id=0, pid=1, tid=1, name="step 0", start_ns=0, end_ns=10 * MS),
            dict(range_id=1, pid=1, tid=1, name="forward", start_ns=1 * MS, end_ns=4 * MS),
        ]
    ).with_columns(domain=None, kind=pl.lit("push_pop"), depth=None, parent_id=None)
    return Profile(
        ops=schemas.empty(schemas.PROFILE_OPS),
        api_calls=schemas.empty(schemas.API_CALLS),
        ranges=ranges,
        meta=meta_frame({"backend": "test"}),
    ).checked()


def test_normalise_makes_the_nested_form():
    raw = _read_form()
    assert type(raw) is Profile and raw.ranges["depth"].null_count() == 2
    nested = normalise(raw)
    assert type(nested) is NestedProfile
    assert nested.ranges["depth"].to_list() == [1, 2]  # a root is at depth 1
    assert nested.ranges["parent_id"].to_list() == [None, 0]
    assert type(nested.checked()) is NestedProfile  # conforming keeps the type


def test_a_nested_report_refuses_ranges_without_depth():
    raw = _read_form()
    with pytest.raises(TypeError, match="nest them with normalise"):
        NestedProfile(ops=raw.ops, api_calls=raw.api_calls, ranges=raw.ranges)
    with pytest.raises(TypeError, match="nest them with normalise"):
        replace(normalise(raw), ranges=raw.ranges)


def test_attribute_takes_the_nested_report():
    frames = Frames()
    frames.range(1, "forward", 0, 5)
    frames.kernel(1, 2)
    ops = attribute(frames.profile())
    assert ops["phase"].to_list() == ["forward"]


_SNIPPET = """
from nsysmap.attribution.attribute import attribute
from nsysmap.attribution.normalise import normalise
from nsysmap.read.nsys.nsys_sqlite import read_sqlite

raw = read_sqlite("run.sqlite")
attribute(normalise(raw))
attribute(raw)
"""


@pytest.mark.slow
def test_mypy_rejects_attributing_a_report_straight_from_a_reader(tmp_path):
    snippet = tmp_path / "snippet.py"
    snippet.write_text(_SNIPPET)
    config, cache = str(ROOT / "setup.cfg"), str(tmp_path / "cache")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", config, "--cache-dir", cache, str(snippet)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert errors == [
        f'{snippet}:8: error: Argument 1 to "attribute" has incompatible type "Profile"; '
        'expected "NestedProfile"  [arg-type]'
    ], done.stdout
