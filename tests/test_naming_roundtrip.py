"""The naming contract: what instrument/ formats, nsysmap/ parses back unchanged."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from instrument import phase_vocabulary as vocabulary
from instrument.phase_vocabulary import PHASES
from instrument.ranges import naming as fmt
from nsysmap.attribution.labels import name_labels
from nsysmap.core import range_names as parse

paths = st.one_of(
    st.just(""),
    st.lists(
        st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}|[0-9]{1,2}", fullmatch=True),
        min_size=1,
        max_size=6,
    ).map(".".join),
    st.text(min_size=1, max_size=20),  # add_module accepts odd names; the path comes last
    st.sampled_from(["a\nb", "x:y", " ", "h.0.attn::weird"]),
)
classes = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)


def test_both_sides_agree_on_the_phases_and_prefix():
    # One vocabulary (instrument/phase_vocabulary.py): what is emitted is what nsysmap knows.
    assert fmt.PHASES is PHASES
    assert PHASES == ("data", "zero_grad", "forward", "loss", "backward", "optimizer")
    assert parse.PREFIX == fmt.PREFIX + fmt.SEP


def test_the_vocabulary_colours_every_phase_and_maps_it_to_an_inferred_one():
    assert set(vocabulary.HTML_COLOURS) == {*PHASES, *vocabulary.INFERRED_PHASES}
    assert set(vocabulary.TRACE_COLOURS) == set(PHASES)
    assert set(vocabulary.INFERRED_OF) == set(PHASES)
    assert set(vocabulary.INFERRED_OF.values()) < set(vocabulary.INFERRED_PHASES)


@pytest.mark.slow
@given(st.integers(0, 10**9))
def test_step(step):
    name = fmt.step_range(step)
    assert parse.parse_range_name(name) == parse.RangeName(kind="step", step=step)


@given(st.sampled_from(PHASES))
def test_phase(phase):
    assert parse.parse_range_name(fmt.phase_range(phase)) == parse.RangeName(
        kind="phase", phase=phase
    )


@pytest.mark.slow
@given(st.sampled_from(["forward", "backward"]), paths, classes)
def test_module(direction, path, cls):
    name = fmt.module_range(direction, path, cls)
    expected = parse.RangeName(
        kind="module", direction=direction, module_class=cls, module_path=path
    )
    assert parse.parse_range_name(name) == expected
    row = name_labels(pl.Series([name], dtype=pl.String)).row(0, named=True)
    assert (row["lbl_module"], row["lbl_module_class"], row["lbl_direction"]) == (
        path,
        cls,
        direction,
    )


@pytest.mark.slow
@given(st.text(max_size=40).filter(lambda s: not s.startswith("nsysmap:")))
def test_foreign_names_are_never_nsysmap_ranges(name):
    assert parse.parse_range_name(name) is None


def test_formatter_rejects_what_the_parser_could_not_read():
    with pytest.raises(ValueError):
        fmt.module_range("forward", "a.b", "Bad:Class")
    with pytest.raises(ValueError):
        fmt.phase_range("warmup")
    with pytest.raises(ValueError):
        fmt.step_range(-1)
