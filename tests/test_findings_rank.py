"""Properties of the ranking of findings: ranked by saving, savings within the time they are
taken from, and no time counted by two findings.

Findings are drawn at random: claims on a few keys of a few pools (each key
with one capacity), some findings of a general rule, some with no known
saving. Then on real output: the same holds for every findings table the
synthetic runs and the samples give.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsysmap.findings.find import findings_table
from nsysmap.findings.finding import CAUSE as CAUSE_TIER
from nsysmap.findings.finding import GENERAL as GENERAL_TIER
from nsysmap.findings.finding import Claim, Finding, Key, Rule
from nsysmap.findings.rank import ranked
from nsysmap.findings.threshold import Threshold
from tests.findings_plans import K, Plan, findings_of


def _rule(name: str, tier: int) -> Rule:
    """A rule of `tier` that finds nothing itself (the findings are drawn)."""
    return Rule(name, name, "fix", name, (Threshold("min_share", 0, ""),), lambda x, r: [], tier)


CAUSE, SPECIFIC, GENERAL = (
    _rule("cause", CAUSE_TIER),
    _rule("specific", 1),
    _rule("general", GENERAL_TIER),
)
KEYS: list[Key] = [
    (pool, None, 0, phase, None, None) for pool in ("busy", "idle") for phase in ("f", "b", "o")
]


@st.composite
def findings(draw: st.DrawFn) -> list[Finding]:
    """Up to 8 findings claiming parts of 6 keys, each key of one capacity."""
    capacity = {k: draw(st.integers(0, 1000)) for k in KEYS}
    out = []
    for i in range(draw(st.integers(0, 8))):
        keys = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=4))
        claims = tuple(Claim(k, draw(st.integers(0, capacity[k])), capacity[k]) for k in keys)
        known = draw(st.integers(0, 9)) > 0
        steps = draw(st.integers(1, 4))
        out.append(
            Finding(
                rule=draw(st.sampled_from([CAUSE, SPECIFIC, GENERAL])),
                device_id=0,
                place=f"place {i}",
                evidence="",
                evidence_rows="",
                basis_ns=sum(c.capacity for c in claims),
                claims=claims if known else (),
                estimate="",
                confidence="low",
                known=known,
                extra_key=str(i),
                steps=steps,
                step_ns=1000,
            )
        )
    return out


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(findings())
def test_findings_are_ranked_by_saving_per_step_unknown_last(drawn):
    out = ranked(drawn)
    assert [r.priority for r in out] == list(range(1, len(drawn) + 1))
    assert sorted(r.finding.key for r in out) == sorted(f.key for f in drawn)
    known = [r for r in out if r.saving_ns is not None]
    per_step = [r.finding.per_step(r.saving_ns) for r in known]
    assert per_step == sorted(per_step, reverse=True)
    assert all(r.saving_ns is None for r in out[len(known) :])


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(findings())
def test_a_saving_never_exceeds_the_time_it_is_taken_from(drawn):
    for r in ranked(drawn):
        if r.saving_ns is None:
            continue
        f = r.finding
        assert r.saving_ns == sum(c.ns for c in r.taken) <= f.basis_ns
        assert r.saving_ns <= sum(c.ns for c in f.claims)  # never more than it asked for
        for c in r.taken:
            wanted = next(w for w in f.claims if w.key == c.key)
            assert 0 < c.ns <= wanted.ns <= c.capacity


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(findings())
def test_no_time_is_counted_by_two_findings(drawn):
    taken: dict[Key, int] = {}
    capacity: dict[Key, int] = {}
    for r in ranked(drawn):
        for c in r.taken:
            taken[c.key] = taken.get(c.key, 0) + c.ns
            capacity[c.key] = c.capacity
    assert all(taken[k] <= capacity[k] for k in taken)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(findings(), st.randoms(use_true_random=False))
def test_the_ranking_does_not_depend_on_the_order_findings_come_in(drawn, rnd: random.Random):
    shuffled = list(drawn)
    rnd.shuffle(shuffled)
    first = [(r.finding.key, r.saving_ns) for r in ranked(drawn)]
    assert [(r.finding.key, r.saving_ns) for r in ranked(shuffled)] == first


def test_a_general_finding_gets_only_what_specific_ones_leave():
    key: Key = ("idle", None, 0, "optimizer", None, None)
    specific = _finding(SPECIFIC, [Claim(key, 300, 500)], "s")
    general = _finding(GENERAL, [Claim(key, 500, 500)], "g")
    out = {r.finding.rule.id: r for r in ranked([general, specific])}
    assert out["specific"].saving_ns == 300 and out["general"].saving_ns == 200
    assert out["general"].overlaps == (out["specific"].priority,)
    assert out["general"].priority == 2  # ranked after: it saves less once served last


def _finding(rule: Rule, claims: list[Claim], tag: str) -> Finding:
    return Finding(
        rule=rule,
        device_id=0,
        place=tag,
        evidence="",
        evidence_rows="",
        basis_ns=500,
        claims=tuple(claims),
        estimate="",
        confidence="low",
        extra_key=tag,
        steps=1,
        step_ns=1000,
    )


@pytest.mark.slow
def test_a_findings_table_holds_the_bounds(tmp_path):
    """A run with two findings over partly the same time: each saving within its basis and
    the step, ranked, in the table's schema."""

    plan = Plan(
        [
            K("ampere_sgemm_128x64_tn", 4.0),
            *[K("vectorized_elementwise_kernel", 0.01, gap=0.05)] * 60,
        ]
    )
    table = findings_of(plan, tmp_path)
    assert table.height >= 2
    assert (table["saving_ns_per_step"] <= table["basis_ns_per_step"]).all()
    assert (table["saving_share"] <= 1).all()
    assert table["priority"].to_list() == list(range(1, table.height + 1))
    assert table.schema == findings_table([]).schema
