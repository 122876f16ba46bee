"""Names cut to a table's width stay told apart (nsysmap.core.inert.distinct_cuts).

Real profiles name rows alike for their first 70 or 100 characters: a module
path's range (`nn.Module: TimesformerForVideoClassification_0.TimesformerModel_0.T…`
for the encoder and each of its twelve layers), pyprof's dict per range. Cut at
their end, such rows printed identically in the terminal's Top ranges and in
report.md's tables of range paths. Rows that would read alike show where their
names differ; every other row keeps its label as it was.
"""

from __future__ import annotations

import re
from itertools import combinations

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsysmap.attribution.attribute import attribute
from nsysmap.core.inert import clipped, distinct_cuts
from nsysmap.flow.verbs import analyse_file
from nsysmap.report.build import build_report
from nsysmap.report.doc_sections import ranges_section
from nsysmap.report.report_files import read_run
from nsysmap.summaries import summary_text as render
from nsysmap.summaries.summarise import summarise
from nsysmap.summaries.summary_text import MAX_LABEL, TOP, render_summary
from nsysmap.summaries.top_ranges import top_ranges
from tests.corpus import corpus_path
from tests.frames import Frames

COMMON = "nn.Module: TimesformerForVideoClassification_0.TimesformerModel_0.TimesformerEncoder_0"
_ROW = re.compile(r"^  (.*?) +[\d,]+ +[\d,.]+ +[\d,.]+ +(?:<?[\d.]+%)$")


def _cut(texts: list[str], width: int) -> list[str]:
    return distinct_cuts(texts, [clipped(t, width) for t in texts], width)


def test_names_alike_once_cut_show_where_they_differ():
    texts = [f"{COMMON}.TimesformerLayer_{i} (TimesformerLayer)" for i in (2, 0, 11)]
    assert len({clipped(t, 72) for t in texts}) == 1  # cut at their end: alike
    labels = _cut(texts, 72)
    assert labels == [
        "nn.Module: …TimesformerEncoder_0.TimesformerLayer_2 (TimesformerLayer)",
        "nn.Module: …TimesformerEncoder_0.TimesformerLayer_0 (TimesformerLayer)",
        "nn.Module: …TimesformerEncoder_0.TimesformerLayer_11 (TimesformerLayer)",
    ]
    assert all(len(label) <= 72 for label in labels)


def test_a_name_that_begins_another_shows_its_end_and_the_other_what_follows():
    encoder = f"{COMMON} (TimesformerEncoder) > rest of it"
    deeper = f"{encoder} > nn.Module: {COMMON}.TimesformerLayer_0 (TimesformerLayer)"
    short, long = _cut([encoder, deeper], 60)
    assert short.endswith("(TimesformerEncoder) > rest of it") and "…" in short
    assert "rest of it > nn.Module" in long and long.endswith("…")


def test_the_window_is_cut_at_its_end_when_the_names_go_on():
    texts = ["x" * 80 + f"{i} and a long tail that follows the difference by far" for i in "ab"]
    labels = _cut(texts, 40)
    assert labels == [
        "xxxxxxxxxx…xxxxxxxxxxa and a long tail …",
        "xxxxxxxxxx…xxxxxxxxxxb and a long tail …",
    ]


def test_names_of_megabytes_are_compared_a_block_at_a_time():
    texts = ["k<" + "float, " * 300_000 + f"{i}>" for i in "ab"]
    assert _cut(texts, 30) == ["k<…float, float, float, a>", "k<…float, float, float, b>"]


def test_labels_that_do_not_collide_are_kept_as_they_are():
    texts = ["short", "x" * 100, "y" * 100, "x" * 100]  # the same name twice: one label
    labels = ["short", "cut x…", "cut y…", "cut x…"]
    assert distinct_cuts(texts, labels, 72) == labels
    assert distinct_cuts([], [], 72) == []


def test_names_alike_even_where_they_differ_are_numbered_from_the_shortest():
    """pyprof on mmagic: each path one level deeper than the one before, by the same two
    names in turn; their tails are alike, so is every window of them."""
    unit = "{'mod': 'torch', 'op': '__getattr__'} > {'traceMarker': ['/workspace/arch.py:148']}"
    paths = [" > ".join([unit] * n) for n in (3, 1, 2)]
    labels = _cut(paths, 50)
    assert [label[-4:] for label in labels[1:]] == [" [1]", " [2]"]  # the tails
    assert " > {'mod'" in labels[0] and labels[0].endswith("…")  # past the others' end
    assert len(set(labels)) == 3 and all(len(label) <= 50 for label in labels)


@given(
    st.lists(st.text("ab. >", min_size=0, max_size=120), min_size=1, max_size=12),
    st.integers(min_value=8, max_value=100),
)
def test_different_names_never_share_a_label_and_every_label_fits(texts, width):
    prefixed = ["common prefix of many names " * 3 + t for t in texts]
    labels = _cut(prefixed, width)
    assert all(len(label) <= width for label in labels)
    for (a, x), (b, y) in combinations(zip(prefixed, labels, strict=True), 2):
        assert (a == b) == (x == y), (a, b, x)


def test_the_terminals_top_ranges_tell_long_paths_apart():
    f = Frames()
    f.range(1, "forward", 0, 100)
    f.range(1, COMMON + " (TimesformerEncoder)", 0, 100)
    for i in range(3):
        f.range(1, f"{COMMON}.TimesformerLayer_{i} (TimesformerLayer)", 10 + 30 * i, 35 + 30 * i)
        f.kernel(1, 12 + 30 * i, dur=5 + i)
    report = f.profile()
    text = render_summary(summarise(attribute(report), report.ranges), {"backend": "nsys"})
    rows = _top_ranges(text)
    assert len(rows) == 5 and len(set(rows)) == 5
    assert "forward > …TimesformerEncoder_0.TimesformerLayer_2 (TimesformerLayer)" in rows
    assert all(len(label) <= MAX_LABEL for label in rows)


def test_the_terminals_other_tables_tell_long_names_apart():
    names = ["void kernel<" + "float, " * 12 + f"{i}>(int)" for i in "ab"] + ["gemm"]
    table = pl.DataFrame({"name": names, "ops": [1, 2, 3], "time_ns": [3, 2, 1]})
    lines = render._section("Top kernels", table, ["name"], 10).splitlines()[1:]
    labels = [line.rsplit(maxsplit=3)[0].strip() for line in lines]
    assert labels[2] == "gemm" and len(set(labels)) == 3
    assert labels[0].endswith("float, a>(int)") and labels[1].endswith("float, b>(int)")


def _top_ranges(text: str) -> list[str]:
    """The labels of the terminal summary's Top ranges rows."""
    lines = text.split("Top ranges")[1].split("\n\n")[0].splitlines()[1:]
    found = [_ROW.match(line) for line in lines]
    return [m.group(1) for m in found if m]


@pytest.mark.corpus
def test_timesformers_top_ranges_differ_where_their_paths_do(tmp_path):
    """tracelens TimeSformer inference: the encoder's and its layers' module ranges read
    `… > nn.Module: TimesformerForVideoClassification_0.TimesformerModel_0.T…` alike."""
    path = corpus_path("tracelens_timesformer_infer_modules_h100.json.gz")
    analysis = analyse_file(path, tmp_path)
    labels = _top_ranges(render_summary(analysis.summaries, {"backend": "torch"}))
    chosen = top_ranges(analysis.summaries.by_range, TOP)
    assert chosen is not None
    paths = chosen.rows["range_path"].to_list()
    assert len(labels) == len(paths) == TOP
    for (a, x), (b, y) in combinations(zip(paths, labels, strict=True), 2):
        assert a == b or x != y, (a, b, x)
    assert all(len(label) <= MAX_LABEL for label in labels)
    assert "ProfilerStep#* > …TimesformerLayer_11 (TimesformerLayer)" in labels


def test_report_tables_of_range_paths_tell_long_paths_apart():
    paths = ["training_step > forward > " + COMMON + f".Layer_{i} (Layer)" for i in (0, 1)]
    paths.append("training_step")
    row = {"calls": 1, "time_ns": 0, "inclusive_ns": 1, "inclusive_share": 0.5, "span_ns": 1}
    own = {"calls": 1, "ops": 1, "time_ns": 1, "time_share": 0.5}
    answer = {
        "unknown": None,
        "user_ranges_only": True,
        "inside": [{"range_path": p, **row} for p in paths],
        "own": [{"range_path": p, **own} for p in paths],
    }
    lines = ranges_section(answer)
    cells = [line.split(" | ")[0].removeprefix("| ") for line in lines if line.startswith("| `")]
    assert cells[2] == "`training_step`" and len(cells) == 6
    assert cells[:3] == cells[3:] and len(set(cells[:3])) == 3
    assert cells[0] == (
        "`training_step > forward …TimesformerModel_0.TimesformerEncoder_0.Layer_0 (Layer)`"
    )
    assert all(len(cell) <= 102 for cell in cells)  # 100 characters and the backticks


@pytest.mark.corpus
def test_gpt2s_report_tables_differ_where_their_paths_do(tmp_path):
    """aiperf GPT-2 on B200: ten rows of report.md's by-range table read `training_step >
    forward > nn.Module: GPT2LMHeadModel_0 (GPT2LMHeadModel) > nn.Module: GPT2LMHeadMod…`."""
    analyse_file(corpus_path("aiperf_hf_gpt2_train_step_with_modules_stack_b200.json"), tmp_path)
    result = build_report(read_run(tmp_path))
    answer = result.answers["answers"]["ranges"]
    section = result.markdown.split("## Where the time goes: by range\n")[1].split("\n## ")[0]
    cells = [line.split(" | ")[0] for line in section.splitlines() if line.startswith("| `")]
    paths = [r["range_path"] for r in answer["inside"] + answer["own"]]
    assert len(cells) == len(paths)
    inside = len(answer["inside"])
    for table in (slice(0, inside), slice(inside, None)):
        pairs = zip(paths[table], cells[table], strict=True)
        for (a, x), (b, y) in combinations(pairs, 2):
            assert a == b or x != y, (a, b, x)
