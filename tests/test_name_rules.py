"""Step and phase names (nsysmap.attribution.rules): every rule, user rules, warm-up.

Each built-in rule is tested on its example; examples taken from a real
profile are checked to occur in that profile (../shared/corpus), so a rule
stays bound to the names people really write.
"""

from __future__ import annotations

import gzip
import json
import re

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.synth import SynthExport
from nsysmap.attribution.attribute import attribute
from nsysmap.attribution.labels import name_labels
from nsysmap.attribution.rules import (
    PHASE_NAMES,
    RULES,
    WARMUP,
    BadNameRule,
    NameRule,
    user_rules,
)
from nsysmap.cli import cli
from nsysmap.core.errors import ExitCode
from tests.cli_runner import nsysmap_cli
from tests.corpus import CORPUS, connect
from tests.frames import Frames
from tests.reference import reference_attribution
from tests.strategies import forest

CORPUS_ROOT = CORPUS.parent
MAIN, AUTOGRAD, PID = 1, 2, 7


def _labels(name: str, rules=None) -> tuple[int | None, str | None]:
    """(step, phase) of a name; the phase "warmup" when the name marks warm-up work
    and gives no phase."""
    step, phase, warmup = _marks(name, rules)
    return step, phase if phase or not warmup else WARMUP


def _marks(name: str, rules=None) -> tuple[int | None, str | None, bool]:
    """(step, phase, warm-up mark) of a name."""
    names = pl.Series([name], dtype=pl.String)
    columns = ["lbl_step", "lbl_phase", "lbl_warmup"]
    step, phase, warmup = name_labels(names, columns, *([rules] if rules else [])).row(0)
    return step, phase, bool(warmup)


def _rule_id(rule: NameRule) -> str:
    return f"{rule.kind}:{rule.phase or ''}:{rule.example}"


@pytest.mark.parametrize("rule", RULES, ids=_rule_id)
def test_each_rule_labels_its_example(rule: NameRule):
    step, phase, warmup = _marks(rule.example)
    if rule.kind == "step":
        assert step == int(re.findall(r"\d+", rule.example)[-1])
    elif rule.phase == WARMUP:
        assert step is None and warmup
    else:
        assert (step, phase) == (None, rule.phase)
    # No earlier rule of the same kind (step, phase, warm-up) takes the example first.
    kind = (rule.kind, rule.phase == WARMUP)
    first = next(
        r for r in RULES if (r.kind, r.phase == WARMUP) == kind and re.search(r.regex, rule.example)
    )
    assert first is rule


def _corpus_names(source: str) -> set[str]:
    """Range names in one corpus file: NVTX texts, or a trace's annotations."""
    path = CORPUS_ROOT / source
    if not path.is_file():
        pytest.skip(f"{source} is not in the corpus at {CORPUS_ROOT}")
    if source.endswith(".sqlite"):
        query = (
            "SELECT DISTINCT coalesce(n.text, s.value) FROM NVTX_EVENTS n "
            "LEFT JOIN StringIds s ON s.id = n.textId"
        )
        with connect(path) as conn:
            return {row[0].decode() for row in conn.execute(query) if row[0] is not None}
    with gzip.open(path) as trace:
        events = json.load(trace)["traceEvents"]
    return {e["name"] for e in events if e.get("cat") == "user_annotation"}


@pytest.mark.corpus
@pytest.mark.parametrize("rule", [r for r in RULES if r.source], ids=_rule_id)
def test_real_examples_occur_in_their_profile(rule: NameRule):
    assert rule.example in _corpus_names(rule.source)


def test_rules_are_well_formed():
    for rule in RULES:
        assert rule.kind in ("step", "phase") and rule.example
        assert (rule.phase in PHASE_NAMES) if rule.kind == "phase" else rule.phase is None
    phases = {rule.phase for rule in RULES if rule.kind == "phase"}
    assert phases == set(PHASE_NAMES)  # every phase has at least one rule


VARIANTS = [
    ("forward pass", None, "forward"),
    ("Forward-Pass", None, "forward"),
    ("forward_pass", None, "forward"),
    ("FORWARDPASS", None, "forward"),
    ("fwd", None, "forward"),
    ("## forward ##", None, "forward"),
    ("model.forward", None, "forward"),
    ("Backward Pass", None, "backward"),
    ("BWD", None, "backward"),
    ("## backward ##", None, "backward"),
    ("loss.backward", None, "backward"),
    ("Loss", None, "loss"),
    ("optimizer step", None, "optimizer"),
    ("optimizer.step", None, "optimizer"),
    ("Optimizer.step#FusedAdam.step", None, "optimizer"),
    ("zero-grad", None, "zero_grad"),
    ("Optimizer.zero_grad#AdamW.zero_grad", None, "zero_grad"),
    ("get_batch", None, "data"),
    ("Data Loading", None, "data"),
    ("warmup", None, "warmup"),
    ("warm-up", None, "warmup"),
    ("Warm_Up", None, "warmup"),
    ("warmup_iter", None, "warmup"),
    ("warmup step 2", None, "warmup"),
    ("ProfilerStep#550", 550, None),
    ("step 3", 3, None),
    ("Step_3", 3, None),
    ("step#12", 12, None),
    ("iteration 5", 5, None),
    ("iter 7", 7, None),
    ("Train Step 4", 4, None),
    # Names that are none of these.
    ("warmup_lr", None, None),
    ("stepping", None, None),
    ("forward and backward", None, None),
    ("## forward:sparse_arch ##", None, None),
    ("computing softmax", None, None),
    ("profile", None, None),
    ("ProfilerStep#99999999999999999999", None, None),  # not an Int64: no step
]


@pytest.mark.parametrize(("name", "step", "phase"), VARIANTS)
def test_names_match_whatever_their_case_and_separators(name, step, phase):
    assert _labels(name) == (step, phase)


def test_user_rules_come_before_the_built_in_table():
    rules = user_rules([r"epoch \d+ batch (\d+)"], [r"data=^forward pass$", "forward=^fwd_"])
    assert _labels("epoch 2 batch 17", rules) == (17, None)
    assert _labels("forward pass", rules) == (None, "data")  # built-in says forward
    assert _labels("fwd_encoder", rules) == (None, "forward")
    assert _labels("## backward ##", rules) == (None, "backward")  # built-in still applies
    assert _labels("fwd_encoder") == (None, None)  # nothing without the user's rule
    assert rules.options() == {
        "step_rules": [r"epoch \d+ batch (\d+)"],
        "phase_rules": [r"data=^forward pass$", "forward=^fwd_"],
    }
    assert user_rules().options() == {}


def test_a_name_a_user_rule_matches_is_read_by_the_user_rules_alone():
    warm_step = "Warm-up Step 3"
    assert _marks(warm_step) == (None, None, True)
    assert _marks(warm_step, user_rules([], ["forward=^Warm-up"])) == (None, "forward", False)
    assert _marks(warm_step, user_rules([r"Step (\d+)"])) == (3, None, False)
    both = user_rules([r"Step (\d+)"], ["warmup=^Warm"])
    assert _marks(warm_step, both) == (3, None, True)
    # Names no user rule matches keep the built-in reading, warm-up included.
    assert _marks("warmup", both) == (None, None, True)
    assert _marks("[param|m|warmup|forward]", both) == (None, "forward", True)


def test_many_names_at_once_keep_one_row_each_and_inline_flags_work():
    names = ["fwd_x", "Epoch_4", "xnll", "## forward ##", "aten::mm"]
    rules = user_rules([r"(?i)EPOCH_(\d+)$"], ["forward=(?i)^FWD", "loss=^ce|^nll"])
    got = name_labels(pl.Series(names), ["lbl_step", "lbl_phase"], rules).rows()
    assert got == [(None, "forward"), (4, None), (None, None), (None, "forward"), (None, None)]


@pytest.mark.parametrize(
    ("steps", "phases", "says"),
    [
        (["epoch (\\d+"], [], "not a valid regular expression (unclosed group)"),
        ([r"epoch \d+"], [], "put the step number in a capture group"),
        ([], ["fwd=^f"], "unknown phase 'fwd'"),
        ([], ["forward"], "expected NAME=REGEX"),
        ([], ["forward=[a-"], "not a valid regular expression"),
    ],
)
def test_bad_user_rules_are_usage_errors(steps, phases, says):
    with pytest.raises(BadNameRule, match=re.escape(says)) as caught:
        user_rules(steps, phases)
    assert caught.value.exit_code == ExitCode.USAGE
    assert "\n" not in str(caught.value)


def _warmup_report() -> tuple[Frames, dict[str, int]]:
    """A warm-up step, then a measured step; backward on the autograd thread.

    main      |--------- Warm-up Step 0 ---------|--------- ProfilerStep#1 ---------|
                |- forward -||- backward ------|   |- forward pass -||- backward -|
    autograd                      |-k-|                                  |-k-|
    """
    f = Frames()
    f.range(MAIN, "Warm-up Step 0", 0, 40)
    f.range(MAIN, "forward", 1, 15)
    f.range(MAIN, "backward", 15, 39)
    f.range(MAIN, "ProfilerStep#1", 40, 80)
    f.range(MAIN, "forward pass", 41, 55)
    f.range(MAIN, "backward", 55, 79)
    ops = {
        "warm_forward": f.kernel(MAIN, 5),
        "warm_backward": f.kernel(AUTOGRAD, 20),
        "forward": f.kernel(MAIN, 45),
        "backward": f.kernel(AUTOGRAD, 60),
    }
    return f, ops


def test_warm_up_ranges_mark_the_work_inside_them_and_keep_its_phase():
    f, ops = _warmup_report()
    got = attribute(f.profile()).select("op_id", "step", "phase", "warmup", "attribution").rows()
    by_op = {op_id: rest for op_id, *rest in got}
    assert by_op[ops["warm_forward"]] == [None, "forward", True, "range"]
    # On the autograd thread: phase and warm-up from the process's ranges.
    assert by_op[ops["warm_backward"]] == [None, "backward", True, "other_thread"]
    assert by_op[ops["forward"]] == [1, "forward", False, "range"]
    assert by_op[ops["backward"]] == [1, "backward", False, "other_thread"]


def test_a_warm_up_range_inside_a_step_marks_only_its_own_work():
    f = Frames()
    f.range(MAIN, "ProfilerStep#1", 0, 40)
    f.range(MAIN, "warmup", 0, 20)
    f.range(MAIN, "forward", 0, 10)
    f.range(MAIN, "ProfilerStep#2", 40, 80)
    f.range(MAIN, "forward", 40, 60)
    for at in (5, 25, 45):
        f.kernel(MAIN, at)
    ops = attribute(f.profile())
    assert ops.select("step", "phase", "warmup").rows() == [
        (1, "forward", True),
        (1, None, False),
        (2, "forward", False),
    ]


FOREIGN_NAMES = (
    "Warm-up Step {i}",
    "warmup",
    "[param|model|0|warmup|forward]",
    "## forward ##",
    "backward pass",
    "Optimizer.step#SGD.step",
    "ProfilerStep#{i}",
    "step {i}",
    "user range",
)


@st.composite
def chains(draw: st.DrawFn) -> list[tuple[int, int]]:
    """Up to three chains of up to three ranges nested inside each other, side by side."""
    out, cursor = [], 0
    for _ in range(draw(st.integers(1, 3))):
        start, width = draw(st.integers(cursor, cursor + 4)), draw(st.integers(2, 16))
        for depth in range(draw(st.integers(1, 3))):
            if width > 2 * depth:
                out.append((start + depth, start + width - depth))
        cursor = start + width
    return out


@pytest.mark.slow  # a property test against the reference: seconds
@settings(max_examples=100, deadline=None)
@given(
    st.data(),
    st.lists(st.tuples(st.sampled_from([1, 2]), st.integers(0, 60)), min_size=1, max_size=20),
)
def test_foreign_names_match_the_reference_on_random_reports(data, kernels):
    """Only foreign step, phase and warm-up names, nested at random, on two threads."""
    f = Frames()
    for tid in (MAIN, AUTOGRAD):
        for start, end in data.draw(chains() if tid == MAIN else forest(max_depth=2)):
            name = data.draw(st.sampled_from(FOREIGN_NAMES))
            f.range(tid, name.format(i=data.draw(st.integers(0, 2))), start, end)
    for tid, at in kernels:
        f.kernel(tid, at)
    report = f.profile()
    expected = reference_attribution(report.ops, report.api_calls, report.ranges)
    for row in attribute(report).iter_rows(named=True):
        want = expected[row["op_id"]]
        assert {k: row[k] for k in want} == want, row


def _user_named_export(path) -> None:
    """One batch of an epoch with the user's own names; kernels at 5 and 25 ms."""
    b = SynthExport()
    b.thread(PID, MAIN, "python")
    b.range(PID, MAIN, 0, 50, "epoch 0 batch 3")
    b.range(PID, MAIN, 1, 20, "fwd_encoder")
    b.range(PID, MAIN, 20, 40, "## backward ##")
    for corr, at in ((1, 5), (2, 25)):
        b.launch(PID, MAIN, at, at + 1, corr)
        b.kernel(PID, 0, 7, at + 2, at + 4, corr, name=f"k{corr}")
    b.write(path)


@pytest.mark.slow
def test_attribute_applies_the_users_rules_and_records_them(tmp_path):
    path, out = tmp_path / "user.sqlite", tmp_path / "out"
    _user_named_export(path)
    args = ["attribute", str(path), "-o", str(out), "--quiet"]
    rules = ["--step", r"batch (\d+)", "--phase", "forward=^fwd_"]
    result = CliRunner().invoke(cli, [*args, *rules])
    assert result.exit_code == 0, result.output
    ops = pl.read_parquet(out / "ops.parquet").sort("op_id")
    assert ops.select("name", "step", "phase").rows() == [
        ("k1", 3, "forward"),
        ("k2", 3, "backward"),
    ]
    options = json.loads((out / "manifest.json").read_text())["options"]
    assert options == {
        "command": "attribute",
        "step_rules": [r"batch (\d+)"],
        "phase_rules": ["forward=^fwd_"],
    }
    result = CliRunner().invoke(cli, args)  # without the rules: neither name is known
    assert result.exit_code == 0, result.output
    ops = pl.read_parquet(out / "ops.parquet").sort("op_id")
    assert ops.select("step", "phase").rows() == [(None, None), (None, "backward")]
    assert "step_rules" not in json.loads((out / "manifest.json").read_text())["options"]


@pytest.mark.parametrize(
    "rule", [["--phase", "fwd=^f"], ["--step", "batch (\\d+"], ["--step", "batch"]]
)
def test_a_bad_rule_option_is_a_one_line_usage_error(tmp_path, capsys, rule):
    missing = tmp_path / "not_there.sqlite"  # rules are checked before the input is read
    assert nsysmap_cli(["attribute", str(missing), *rule]) == ExitCode.USAGE == 2
    err = capsys.readouterr().err
    assert err.startswith("nsysmap: error: ") and err.count("\n") == 1


def test_run_checks_rule_options_before_running_anything(tmp_path, capsys):
    script = tmp_path / "never_run.py"
    script.write_text("raise SystemExit('ran')\n")
    assert nsysmap_cli(["run", "--phase", "forward=(", str(script)]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith("nsysmap: error: --phase 'forward=('") and err.count("\n") == 1
