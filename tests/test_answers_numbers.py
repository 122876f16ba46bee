"""Every number in report.md comes from answers.json, and no sentence contradicts its table.

`nsysmap report` renders report.md from answers.json alone
(nsysmap.report.markdown). These tests hold it to that on both samples and
every real profile with GPU work: each number token of report.md's prose and
table bodies (code spans and table header lines left out) must be a value of
answers.json as the report's formatters write it (nsysmap.report.format: ms,
pct, flop, num with 2, 3 or 4 digits, per, ratio, integers with and without thousands
commas), or such a value per step (layers, blocks) or per step and module
(FLOPs of a layer), or a constant of the text (CONSTANT_TEXT). Numbers inside
a text of answers.json (a reason, a name) count as that text's.

Then the sentences that restate a table must say what the table says: the
matmul shares, and whether the top kernel is the same with backward included.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import polars as pl
import pytest

from nsysmap.core.inert import markdown_text
from nsysmap.report.build import build_report
from nsysmap.report.format import flop, kernel, ms, num, pct, per, ratio
from nsysmap.report.markdown import render
from nsysmap.report.report_files import read_run
from tests.answers_profiles import Reported, attributed, profile_params, reported

# A number as the report writes it: 1,350 / 24.00 / 12.345 ms / 73.0 % / 1.602 TFLOP
# (not the TFLOP of "TFLOP/s", not digits inside a word such as H100 or GPT2Block).
NUMBER = re.compile(
    r"(?<![\w.,])\d+(?:,\d{3})*(?:\.\d+)?(?: (?:ms|%|[kMGTP]?FLOP)(?![\w/]))?(?!\w)"
)
CODE_SPAN = re.compile(r"`[^`\n]*`")
TABLE_RULE = re.compile(r"\|(?:---\|)+")
# The report's fixed text with numbers in it: what the numbers of a sentence mean,
# not values of the profile.
CONSTANT_TEXT: tuple[str, ...] = ()
SAME_KERNEL = "Same top kernel with backward included: "


def values(value: Any, numbers: list[float], texts: list[str]) -> None:
    """Every number (booleans aside) and every text of an answers.json value, recursively."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int | float):
        numbers.append(value)
    elif isinstance(value, str):
        texts.append(value)
    else:
        items = value.values() if isinstance(value, dict) else value
        for item in items:
            values(item, numbers, texts)


def formatted(x: float) -> set[str]:
    """`x` as each of the report's formatters writes it."""
    out = {ms(x), pct(x), flop(x), num(x, 2), num(x, 3), num(x, 4), per(x), ratio(x)}
    if isinstance(x, int):  # counts: never a float that happens to be whole
        out |= {f"{x:,}", str(x)}
    return out


def _numbers_of(row: dict[str, Any]) -> list[float]:
    numbers: list[float] = []
    values(row, numbers, [])
    return numbers


def allowed_numbers(doc: dict[str, Any]) -> set[str]:
    """Each value of answers.json as the report may print it, per step where it divides."""
    numbers: list[float] = []
    values(doc, numbers, [])
    answers = doc["answers"]
    layers = answers["layer_time"]
    steps = layers["per_step"] or 1
    for row in layers["layers"]:
        mine = _numbers_of(row)
        numbers += [x / steps for x in mine]
        numbers += [x / (steps * row["modules"]) for x in mine if row["modules"]]
    numbers.append(len(layers["layers"]))  # "top 20 of 204 by time"
    per_block = answers["blocks"].get("per_step") or 1
    for row in answers["blocks"]["rows"]:
        numbers += [x / per_block for x in _numbers_of(row)]
    return {text for x in numbers for text in formatted(x)}


def prose(markdown: str, doc: dict[str, Any]) -> str:
    """report.md without table header lines, code spans, constant text, and the texts of
    answers.json (whose numbers are theirs)."""
    lines = markdown.splitlines()
    kept = [
        line
        for line, after in zip(lines, [*lines[1:], ""], strict=True)
        if not TABLE_RULE.fullmatch(after)
    ]
    text = CODE_SPAN.sub(" ", "\n".join(kept))
    for constant in CONSTANT_TEXT:
        text = text.replace(constant, " ")
    texts: list[str] = []
    values(doc, [], texts)
    # as the prose has them: plain, or as prose quoting names (markdown_text: a finding's
    # evidence), with their own code spans blanked too
    worded = {
        CODE_SPAN.sub(" ", form)
        for t in texts
        if re.search(r"\d", t) and re.search(r"[A-Za-z]", t)
        for form in (t, markdown_text(t))
    }
    for t in sorted(worded, key=len, reverse=True):
        for form in {t, t[:1].upper() + t[1:]}:
            text = re.sub(rf"(?<!\w){re.escape(form)}(?!\w)", " ", text)
    return text


def stray_numbers(markdown: str, doc: dict[str, Any]) -> list[str]:
    """The numbers of report.md that are no value of answers.json."""
    allowed = allowed_numbers(doc)
    return [token for token in NUMBER.findall(prose(markdown, doc)) if token not in allowed]


def cells(line: str) -> list[str]:
    """The cells of a Markdown table row (escaped pipes stay in their cell)."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]


def table_rows(markdown: str, header: list[str]) -> list[list[str]]:
    """The body rows of the table with this header."""
    lines = markdown.splitlines()
    start = lines.index("| " + " | ".join(header) + " |") + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(cells(line))
    return rows


@pytest.fixture(scope="module", params=profile_params())
def report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Reported:
    return reported(request.param, tmp_path_factory.mktemp("numbers"))


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    """The training sample's report compared with the inference sample's."""
    root = tmp_path_factory.mktemp("compared")
    train = attributed("gpt2_tiny_train.sqlite", root / "train")
    infer = attributed("gpt2_tiny_infer.sqlite", root / "infer")
    result = build_report(read_run(train), read_run(infer))
    return result.markdown, result.answers


@pytest.mark.slow
def test_every_number_of_report_md_is_a_value_of_answers_json(report: Reported) -> None:
    assert render(report.answers) == report.markdown  # report.md is answers.json rendered
    assert NUMBER.findall(prose(report.markdown, report.answers))  # there is something to check
    assert stray_numbers(report.markdown, report.answers) == []


@pytest.mark.slow
def test_every_number_of_a_compared_report_is_a_value_of_answers_json(
    compared: tuple[str, dict[str, Any]],
) -> None:
    markdown, doc = compared
    assert "Compared with:" in markdown and doc["answers"]["matmul_share"]["compare"]
    assert stray_numbers(markdown, doc) == []


@pytest.mark.slow
def test_a_number_not_in_answers_json_is_caught(compared: tuple[str, dict[str, Any]]) -> None:
    markdown, doc = compared
    lines = markdown.splitlines()
    row = next(i for i, line in enumerate(lines) if TABLE_RULE.fullmatch(line)) + 1
    changed = cells(lines[row])
    changed[-1] = "987.6 %"
    lines[row] = "| " + " | ".join(changed) + " |"
    lines.append("The step took 12,345.678 ms (`4.2 ms` is code).")
    assert stray_numbers("\n".join(lines), doc) == ["987.6 %", "12,345.678 ms"]


def test_compared_sentences_say_what_the_compared_rows_say(
    compared: tuple[str, dict[str, Any]],
) -> None:
    markdown, doc = compared
    other = "forward-only run" if doc["compare"]["kind"] == "forward-only run" else "compared run"
    rows = table_rows(markdown, ["run", "scope", "time", "matmul", "share"])
    theirs = {row[1]: row for row in rows if row[0] == other}
    assert theirs
    for scope, row in theirs.items():
        said = f"- {other.capitalize()}, {scope}: {row[4]} of {row[2]}."
        assert said in markdown.splitlines()
    header = ["run", "scope", "kernel", "category", "calls", "calls per pass"]
    header += ["calls per forward pass", "time", "share"]
    top = {(row[0], row[1]): row[2] for row in table_rows(markdown, header)}
    mine, full = top[("this run", doc["scopes"]["step"]["label"])], top[(other, "full step")]
    verdict = "yes" if mine == full else "no"
    assert f"Same top kernel in the {other}'s full step: {verdict}." in markdown
    assert doc["answers"]["top_kernel"]["same_in_compare"] is (mine == full)


def _same_kernel_sentence(markdown: str) -> str:
    found = [line for line in markdown.splitlines() if line.startswith(SAME_KERNEL)]
    assert len(found) == 1, found
    return found[0].removeprefix(SAME_KERNEL)


def _top_cell(markdown: str, scope_label: str) -> str:
    header = ["run", "scope", "kernel", "category", "calls", "calls per pass"]
    header += ["calls per forward pass", "time", "share"]
    rows = table_rows(markdown, header)
    (row,) = [r for r in rows if r[:2] == ["this run", scope_label]]
    return row[2]


@pytest.mark.slow
def test_same_top_kernel_sentence_agrees_with_the_top_kernel_table(report: Reported) -> None:
    answer = report.answers["answers"]["top_kernel"]
    said = _same_kernel_sentence(report.markdown)
    forward, both = answer["scopes"].get("forward"), answer["scopes"].get("forward_backward")
    if both is None:  # no backward work: nothing to compare with
        assert "forward_backward" not in report.answers["scopes"]
        assert said.startswith("unknown (") and answer["same_with_backward"] is None
        return
    known = all(e.get("name") and not e.get("unknown") for e in (forward or {}, both))
    if not known:
        assert said.startswith("unknown (") and answer["same_with_backward"] is None
        return
    same = forward["name"] == both["name"]
    assert answer["same_with_backward"] is same
    assert said == (
        f"{'yes' if same else 'no'} (forward: `{forward['label']}`; "
        f"forward + loss + backward: `{both['label']}`)."
    )
    labels = report.answers["scopes"]
    assert _top_cell(report.markdown, labels["forward"]["label"]) == kernel(forward["label"], 90)
    fb_cell = _top_cell(report.markdown, labels["forward_backward"]["label"])
    assert fb_cell == kernel(both["label"], 90)
    assert (_top_cell(report.markdown, labels["forward"]["label"]) == fb_cell) is same


def test_no_backward_work_means_no_backward_scope(report: Reported) -> None:
    ops = pl.read_parquet(report.out / "ops.parquet", columns=["phase"])
    if (ops["phase"] == "backward").any():
        assert "forward_backward" in report.answers["answers"]["top_kernel"]["scopes"]
    if "forward_backward" not in report.answers["scopes"]:
        assert not (ops["phase"] == "backward").any()
        forward_work = report.answers["scopes"]["forward"]["ops"] > 0
        # Without a forward scope, nothing marks a forward pass: the profile may still
        # hold one, so the report must not say it has no forward work.
        said = "no backward work" if forward_work else "no range, record or module call marks"
        assert _same_kernel_sentence(report.markdown).startswith(f"unknown ({said}")


def test_matmul_sentences_say_the_shares_of_the_table(report: Reported) -> None:
    scopes = report.answers["answers"]["matmul_share"]["scopes"]
    rows = table_rows(report.markdown, ["run", "scope", "time", "matmul", "share"])
    table = {row[1]: row for row in rows if row[0] == "this run"}
    sentences = [line for line in report.markdown.splitlines() if line.startswith("- ")]
    shown = [s for s, e in scopes.items() if e.get("time_ns")]
    assert len(table) == len(shown)
    for scope in shown:
        entry, label = scopes[scope], report.answers["scopes"][scope]["label"]
        row = table[label]
        assert row[2] == ms(entry["time_ns"]) and row[3] == ms(entry["matmul_time_ns"])
        where = f"- {label[:1].upper() + label[1:]}: "
        (said,) = [s.removeprefix(where) for s in sentences if s.startswith(where)]
        if entry["share"] is None:
            assert said.startswith("unknown, ") and row[4].startswith("unknown")
        else:
            assert row[4] == pct(entry["share"])
            assert said == f"{row[4]} of {row[2]} is matrix multiplication."


def test_each_scope_is_a_part_of_the_next(report: Reported) -> None:
    """forward within forward + loss + backward within the full step, in time and in
    matmul time: no answer may show a part larger than its whole (work the GPU ran
    from before the capture has a phase but no step, and is in none of them)."""
    scopes = report.answers["scopes"]
    shares = report.answers["answers"]["matmul_share"]["scopes"]
    chain = [s for s in ("forward", "forward_backward", "step") if s in scopes]
    for part, whole in itertools.pairwise(chain):
        assert scopes[part]["time_ns"] <= scopes[whole]["time_ns"], (part, whole)
        if part in shares and whole in shares:
            assert shares[part]["matmul_time_ns"] <= shares[whole]["matmul_time_ns"]
