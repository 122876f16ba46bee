"""answers.json against an independent recomputation from ops.parquet and by_range.parquet.

The reference below reads only the Parquet files nsysmap attribute writes, with
DuckDB SQL (and plain Python over range paths); it imports nothing of
nsysmap.report. It answers the four questions of the report the way the
documentation defines them, on both samples and every real corpus profile:

* scopes: step = operations in a step (without steps: in a phase; without
  phases: all), forward = phase `forward` (without phases: forward module calls
  when module calls cover at least half the time), forward_backward = phases
  forward, loss and backward (backward module calls likewise); phase scopes only
  inside steps where there are steps; forward_backward present only with
  backward work; warm-up work (WARMUP) is in none of them;
* matmul share: gemm and attention kernels over a scope's time; CUDA graph
  replays make it unknown, with bounds;
* top kernel: most time by name (graph replays aside), its calls, calls per
  pass ((device, step) pairs) and per forward pass (forward passes: steps, else
  outermost forward-phase range instances in by_range.parquet outside warm-up,
  else, without phases, outermost forward module range instances);
* non-matmul kernels and PyTorch operators with at least 1 % of a scope;
* softmax against the attention matmuls: by attention modules (class names
  attention), else by the user's ranges named softmax / matmul / scores inside a
  range named attention (by their own names where no range names attention).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import duckdb
import pytest

from tests.answers_profiles import Reported, profile_params, reported

# Warm-up work, left out of every scope: the one place that says how it is marked.
WARMUP = "coalesce(warmup, false)"
MATMUL = "coalesce(category IN ('gemm', 'attention'), false)"
GRAPH = "coalesce(kind = 'graph', false)"
MIN_SHARE = 0.01  # "non-matmul kernels above 1 % of the time"
MODULES_COVER = 0.5  # module calls stand for phases when they cover half the time
ATTENTION_CLASS = "(?i)attention|attn"

# Range names, as data (the built-in rules of docs/cli.md; `*` is a step number in a path).
SEPARATOR = " > "
_S = r"[\s_.\-]*"  # any run of separators, or none
_FOLDED = r"(?i:^[#\s]*(?:{})[#\s]*$)"
# PARAM benchmarks' names: `[param|<model>|...|measure|forward]`, `[param|...|warmup...]`.
_PARAM = r"\[param[|/][^\]]*[|/]"
FORWARD_NAME = re.compile(
    rf"^nsysmap:phase:forward$|{_PARAM}forward\]|"
    + _FOLDED.format(
        rf"(?:(?:model|ddp|fsdp|distributed{_S}data{_S}parallel|"
        rf"fully{_S}sharded{_S}data{_S}parallel){_S})?forward(?:{_S}pass)?|fwd"
    )
)
WARMUP_NAME = re.compile(
    rf"^nsysmap:phase:warmup$|{_PARAM}warm[\s_-]*up|"
    + _FOLDED.format(
        rf"warm{_S}up(?:{_S}(?:steps?|iters?|iterations?|runs?|phase))?"
        rf"(?:{_S}[#:=]?{_S}(?:\d+|\*))?"
    )
)
FORWARD_MODULE_NAME = re.compile(r"^nsysmap:fwd:[^:]+:|^FSDP forward \(.*\)$|^nn\.Module: \S+ \(")
OPERATOR_FIELDS = re.compile(r", (?:stashed seq|seq|op_id|sizes|input_op_ids) = .*$", re.S)
OPERATOR_NAME = re.compile(
    r"^(?:FSDP::|(?:[a-z_]\w*::)+(?:[A-Z_]|[a-z0-9](?:[a-z0-9_]|[0-9_][A-Z]+)*"
    r"(?:[^\w:]|:[^:]|$))|\w+Backward\d*$)"
)
ATTENTION_RANGE = re.compile(ATTENTION_CLASS)
SOFTMAX_RANGE = re.compile(r"(?i)softmax")
MATMUL_RANGE = re.compile(r"(?i)mat[ _-]?mul|\bscores?\b")


@dataclass
class Reference:
    """The answers recomputed from one output directory's Parquet files."""

    db: duckdb.DuckDBPyConnection

    def value(self, sql: str) -> Any:
        row = self.db.execute(sql).fetchone()
        assert row is not None
        return row[0]

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        return self.db.execute(sql).fetchall()

    def fact(self, expr: str) -> Any:
        return self.value(f"SELECT {expr} FROM ops")

    def scopes(self) -> dict[str, str]:
        """scope -> SQL condition on ops, for the scopes the profile has."""
        has_steps = self.fact("bool_or(step IS NOT NULL)")
        has_phases = self.fact("bool_or(phase IS NOT NULL)")
        total = self.fact("coalesce(sum(dur_ns), 0)")
        called = self.fact("coalesce(sum(dur_ns) FILTER (WHERE direction IS NOT NULL), 0)")
        basis = "step" if has_steps else "phase" if has_phases else None
        step = f"{basis} IS NOT NULL" if basis else "true"
        if has_phases:
            forward, both = "phase = 'forward'", "phase IN ('forward', 'loss', 'backward')"
            if has_steps:
                forward, both = (f"{w} AND step IS NOT NULL" for w in (forward, both))
        elif total and called >= MODULES_COVER * total:
            forward, both = "direction = 'forward'", "direction IN ('forward', 'backward')"
        else:
            forward = both = "false"
        scopes = {"forward": forward, "forward_backward": both, "step": step}
        scopes = {name: f"({where}) AND NOT {WARMUP}" for name, where in scopes.items()}
        backward = "phase = 'backward'" if has_phases else f"{both} AND direction = 'backward'"
        if not self.fact(f"coalesce(bool_or({backward}), false)"):
            del scopes["forward_backward"]
        return scopes

    def forward_passes(self) -> int | None:
        forward = self.scopes()["forward"]
        if not self.value(f"SELECT count(*) FROM ops WHERE {forward}"):
            return None
        if self.fact("bool_or(step IS NOT NULL)"):
            pairs = f"SELECT DISTINCT device_id, step FROM ops WHERE {forward} AND step IS NOT NULL"
            return self.value(f"SELECT count(*) FROM ({pairs})") or None
        phase_calls, module_calls = self.forward_range_calls()
        if phase_calls:
            return phase_calls
        has_phases = self.fact("bool_or(phase IS NOT NULL)")
        return module_calls if module_calls and not has_phases else None

    def forward_range_calls(self) -> tuple[int, int]:
        """(instances of outermost forward-phase ranges, of outermost forward module
        ranges) outside warm-up ranges, devices summed, from by_range.parquet."""
        phase = module = 0
        for path, calls in self.rows(
            "SELECT range_path, sum(calls) FROM by_range WHERE range_path IS NOT NULL "
            "GROUP BY range_path"
        ):
            names = path.split(SEPARATOR)
            if any(WARMUP_NAME.search(name) for name in names):
                continue
            *outer, last = names
            if FORWARD_NAME.search(last) and not any(FORWARD_NAME.search(n) for n in outer):
                phase += int(calls)
            if FORWARD_MODULE_NAME.search(last) and not any(
                FORWARD_MODULE_NAME.search(n) for n in outer
            ):
                module += int(calls)
        return phase, module

    def passes(self, where: str) -> int | None:
        pairs = f"SELECT DISTINCT device_id, step FROM ops WHERE {where} AND step IS NOT NULL"
        return self.value(f"SELECT count(*) FROM ({pairs})") or None

    def leaders(self, where: str) -> list[tuple[str, int, int]]:
        """The two kernels (by name, graph replays aside) with the most time: name, calls, ns."""
        return [
            (name, int(calls), int(ns))
            for name, calls, ns in self.rows(
                f"SELECT name, count(*), sum(dur_ns) FROM ops WHERE {where} AND NOT {GRAPH} "
                "GROUP BY name ORDER BY sum(dur_ns) DESC, name LIMIT 2"
            )
        ]

    def top_known(self, where: str) -> bool:
        """False when graph replays, whose kernels are unseen, could hold enough time to put
        another kernel (the runner-up, or one seen only in them) ahead of the leader."""
        graph = self.total(f"{where} AND {GRAPH}")
        times = [ns for _, _, ns in self.leaders(where)] + [0, 0]
        return not graph or graph < times[0] - times[1]

    def calls(self, where: str, name: str) -> int:
        row = self.db.execute(f"SELECT count(*) FROM ops WHERE {where} AND name = ?", [name])
        found = row.fetchone()
        assert found is not None
        return int(found[0])

    def total(self, where: str) -> int:
        return int(self.value(f"SELECT coalesce(sum(dur_ns), 0) FROM ops WHERE {where}"))

    def attention_ranges(self, step: str) -> tuple[int, int] | None:
        """(softmax ns, matmul ns) from the user's ranges around attention; None without."""
        paths = self.rows(
            f"SELECT range_path, sum(dur_ns) FROM ops WHERE {step} AND range_path IS NOT NULL "
            "GROUP BY range_path"
        )
        named = [(user_names(path), int(ns)) for path, ns in paths]
        enclosed = any(n and ATTENTION_RANGE.search(n) for names, _ in named for n in names)
        times = {"softmax": 0, "matmul": 0}
        found = False
        for names, ns in named:
            part = attention_part(names, enclosed)
            if part is not None:
                times[part] += ns
                found = True
        return (times["softmax"], times["matmul"]) if found else None


def user_names(path: str) -> list[str | None]:
    """Each range name of a path, None where it is an operator's or nsysmap's own."""
    out: list[str | None] = []
    for name in path.split(SEPARATOR):
        bare = OPERATOR_FIELDS.sub("", name)
        own = OPERATOR_NAME.search(bare) or bare.startswith("nsysmap:")
        out.append(None if own else bare)
    return out


def attention_part(names: list[str | None], enclosed: bool) -> str | None:
    """ "softmax", "matmul" or None for operations launched inside these ranges."""
    if enclosed:
        first = next((i for i, n in enumerate(names) if n and ATTENTION_RANGE.search(n)), None)
        if first is None:
            return None
        names = names[first + 1 :]
    if any(n and SOFTMAX_RANGE.search(n) for n in names):
        return "softmax"
    if any(n and MATMUL_RANGE.search(n) for n in names):
        return "matmul"
    return None


def ratio(part: int | None, whole: int | None) -> float | None:
    return None if part is None or not whole else part / whole


@pytest.fixture(scope="module", params=profile_params())
def profile(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Reported, Reference]]:
    report = reported(request.param, tmp_path_factory.mktemp("reference"))
    options = json.loads((report.out / "manifest.json").read_text()).get("options") or {}
    assert not options.get("phase_rules") and not options.get("step_rules")  # built-in names
    db = duckdb.connect()
    for table in ("ops", "by_range"):
        file = report.out / f"{table}.parquet"
        db.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{file}')")
    yield report, Reference(db)
    db.close()


def answer(report: Reported, name: str) -> dict[str, Any]:
    return report.answers["answers"][name]


def test_scopes_are_the_documented_operations(profile: tuple[Reported, Reference]) -> None:
    report, ref = profile
    scopes = ref.scopes()
    assert list(answer(report, "matmul_share")["scopes"]) == list(scopes)
    for scope, where in scopes.items():
        facts = report.answers["scopes"][scope]
        assert facts["ops"] == ref.value(f"SELECT count(*) FROM ops WHERE {where}")
        assert facts["time_ns"] == ref.total(where)


def test_matmul_share_per_scope(profile: tuple[Reported, Reference]) -> None:
    report, ref = profile
    for scope, where in ref.scopes().items():
        got = answer(report, "matmul_share")["scopes"][scope]
        total, matmul = ref.total(where), ref.total(f"{where} AND {MATMUL}")
        graph = ref.total(f"{where} AND {GRAPH}")
        assert (got["time_ns"], got["matmul_time_ns"]) == (total, matmul), scope
        if graph:  # replays hide their kernels: unknown, between bounds
            assert got["share"] is None and got["unknown"]
            assert got["share_at_least"] == pytest.approx(matmul / total)
            assert got["share_at_most"] == pytest.approx((matmul + graph) / total)
        else:
            assert got["share"] == pytest.approx(ratio(matmul, total)), scope
            assert (got["unknown"] is None) == bool(total)


def test_top_kernel_its_calls_and_calls_per_forward_pass(
    profile: tuple[Reported, Reference],
) -> None:
    report, ref = profile
    top = answer(report, "top_kernel")
    scopes = ref.scopes()
    passes = ref.forward_passes()
    assert top["forward_passes"] == report.answers["run"]["forward_passes"] == passes
    for scope, where in scopes.items():
        got = top["scopes"][scope]
        leaders = ref.leaders(where)
        if not leaders:
            assert got.get("name") is None and got["unknown"]
            continue
        name, calls, ns = leaders[0]
        assert (got["name"], got["calls"], got["time_ns"]) == (name, calls, ns), scope
        total = ref.total(where)
        assert got["share"] == pytest.approx(ns / total)
        count = passes if scope == "forward" else ref.passes(where)
        forward_calls = ref.calls(scopes["forward"], name)
        assert (got["passes"], got["forward_calls"]) == (count, forward_calls), scope
        assert got["calls_per_pass"] == pytest.approx(ratio(calls, count))
        assert got["calls_per_forward_pass"] == pytest.approx(ratio(forward_calls, passes))
        assert (got["unknown"] is not None) == (not ref.top_known(where)), scope


def test_same_top_kernel_with_backward_included(profile: tuple[Reported, Reference]) -> None:
    report, ref = profile
    scopes = ref.scopes()
    top = answer(report, "top_kernel")

    def best(scope: str) -> str | None:
        leaders = ref.leaders(scopes[scope]) if scope in scopes else []
        return leaders[0][0] if leaders else None

    forward, both = best("forward"), best("forward_backward")
    hidden = not all(
        ref.top_known(scopes[s]) for s in ("forward", "forward_backward") if s in scopes
    )
    if forward is None or both is None or hidden:
        assert top["same_with_backward"] is None and top["same_with_backward_unknown"]
    else:
        assert top["same_with_backward"] is (forward == both)
        assert top["same_with_backward_unknown"] is None


def test_non_matmul_kernels_and_operators_above_one_percent(
    profile: tuple[Reported, Reference],
) -> None:
    report, ref = profile
    entries = answer(report, "non_matmul_kernels")
    assert entries["min_share"] == MIN_SHARE
    for scope, where in ref.scopes().items():
        got = entries["scopes"][scope]
        total = ref.total(where)
        if not total:
            assert got["unknown"] and got["kernels"] == got["operators"] == []
            continue
        other = f"{where} AND NOT {MATMUL}"
        assert got["non_matmul_time_ns"] == ref.total(other)
        kernels = ref.rows(
            f"SELECT name, count(*), sum(dur_ns) FROM ops WHERE {other} AND NOT {GRAPH} "
            f"GROUP BY name HAVING sum(dur_ns) / {total} >= {MIN_SHARE} "
            "ORDER BY sum(dur_ns) DESC, name"
        )
        shown = [(k["name"], k["calls"], k["time_ns"]) for k in got["kernels"]]
        assert shown == [(n, c, int(t)) for n, c, t in kernels], scope
        # An operator's category: its most frequent kernel category (ties: first by name).
        mode = (
            f"SELECT aten_op, category AS top, row_number() OVER (PARTITION BY aten_op "
            f"ORDER BY count(*) DESC, category) AS rank FROM ops "
            f"WHERE {other} AND aten_op IS NOT NULL GROUP BY aten_op, category"
        )
        operators = ref.rows(
            f"SELECT aten_op, count(*), count(DISTINCT name), sum(dur_ns), any_value(m.top) "
            f"FROM ops JOIN ({mode}) m USING (aten_op) WHERE {other} AND m.rank = 1 "
            f"GROUP BY aten_op HAVING sum(dur_ns) / {total} >= {MIN_SHARE} "
            "ORDER BY sum(dur_ns) DESC, aten_op"
        )
        grouped = [
            (o["aten_op"], o["kernels"], o["distinct_kernels"], o["time_ns"], o["category"])
            for o in got["operators"]
        ]
        assert grouped == [(a, k, d, int(t), c) for a, k, d, t, c in operators], scope
        named = ref.value(f"SELECT count(*) FROM ops WHERE {other} AND aten_op IS NOT NULL")
        assert (got["operators_unknown"] is None) == bool(named)


def test_softmax_against_the_attention_matmuls(profile: tuple[Reported, Reference]) -> None:
    report, ref = profile
    got = answer(report, "softmax_vs_matmul")
    step = ref.scopes()["step"]
    in_module = f"coalesce(regexp_matches(module_class, '{ATTENTION_CLASS}'), false)"
    fused = ref.total(f"{step} AND category = 'attention'")
    softmax_all = ref.total(f"{step} AND category = 'softmax'")
    assert got["fused_attention_ns"] == fused
    every = got["by_kernel_category"]["time"]
    assert every["matmul_ns"] == ref.total(f"{step} AND {MATMUL}")
    if fused and not softmax_all:  # softmax inside fused kernels: unknown, not 0
        assert every["softmax_ns"] is None and every["ratio"] is None and every["unknown"]
    else:
        assert every["softmax_ns"] == softmax_all
        assert every["ratio"] == pytest.approx(ratio(softmax_all, every["matmul_ns"]))
    if ref.value(f"SELECT count(*) FROM ops WHERE {step} AND {in_module}"):
        source: str | None = "modules"
        softmax = ref.total(f"{step} AND category = 'softmax' AND {in_module}")
        matmul = ref.total(f"{step} AND (category = 'attention' OR ({MATMUL} AND {in_module}))")
    else:
        times = ref.attention_ranges(step)
        source = "ranges" if times else None
        softmax, matmul = times or (None, None)  # no attention source: unknown, not 0
    assert got["attention_source"] == source
    attention = got["attention"]["time"]
    hidden = source is not None and fused and not softmax
    assert (attention["softmax_ns"], attention["matmul_ns"]) == (
        None if hidden else softmax,
        matmul,
    )
    if source is None or (fused and not softmax):
        assert attention["ratio"] is None and attention["unknown"]
    else:
        assert attention["ratio"] == pytest.approx(ratio(softmax, matmul))
