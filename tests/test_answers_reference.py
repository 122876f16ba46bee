"""answers.json against an independent recomputation from ops.parquet, by_range.parquet and
structure.parquet.

The reference below reads only the Parquet files nsysmap attribute writes, with
DuckDB SQL (and plain Python over range paths); it imports nothing of
nsysmap.report nor of nsysmap.structure. It answers the four questions of the
report the way the documentation defines them, on both samples, a synthetic
profile and every real corpus profile, over the instances of structure.parquet
(which passes the profile holds is tested against the truth elsewhere:
tests/test_structure_shapes.py):

* placement: an operation is in a row of structure.parquet when it has the row's
  device and process, its launch (its own start without a launch call) lies in
  the row's span and it carries the row's step and phase labels where the row
  names them; operations without a launch call in a process with launch calls
  are in none;
* scopes: step = the measured steps (without any: the measured region),
  forward = the measured forward passes, forward_backward = the forward and
  backward passes, and the loss work, of the measured region, else of the warm-up
  where only it has backward passes; warm-up work (WARMUP) is in no measured scope;
* matmul share: gemm and attention kernels over a scope's time; CUDA graph
  replays make it unknown, with bounds;
* top kernel: the kernel (copies, memsets and graph replays are none) with most
  time, by name, its calls, calls per pass (the scope's steps) and per forward
  pass (the measured forward passes);
* non-matmul kernels and PyTorch operators with at least 1 % of a scope;
* softmax against the attention matmuls: by attention modules (class names
  attention), else by the user's ranges named softmax / matmul / scores inside a
  range named attention (by their own names where no range names attention);
  the kernel rows set softmax kernels against those attention matmuls' kernels.
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
KERNEL = "coalesce(kind IN ('kernel', 'cpu_op'), false)"
# Which row of structure.parquet of one kind holds each operation (documented in
# docs/outputs.md, structure.parquet): the same device and process, the launch in the
# span, the labels the row names; none for work launched before the capture.
_HELD = """
    LEFT JOIN (SELECT * FROM structure WHERE {where}) {alias}
      ON coalesce({alias}.device_id, -1) = coalesce(o.device_id, -1)
     AND coalesce({alias}.pid, -1) = coalesce(o.pid, -1)
     AND coalesce(o.launch_start_ns, o.start_ns) BETWEEN {alias}.start_ns AND {alias}.end_ns
     AND ({alias}.step IS NULL OR {alias}.step = o.step)
     AND ({alias}.phase IS NULL OR {alias}.phase = o.phase)
     AND NOT o.early"""
PLACED = (
    "CREATE TABLE placed AS SELECT o.op_id, r.region AS region, s.index AS step_index, "
    "s.region AS step_region, p.index AS pass_index, p.direction AS pass_direction, "
    "p.region AS pass_region "
    "FROM (SELECT *, launch_start_ns IS NULL AND bool_or(launch_start_ns IS NOT NULL) "
    "OVER (PARTITION BY pid) AS early FROM raw_ops) o"
    + _HELD.format(where="kind = 'region'", alias="r")
    + _HELD.format(where="kind = 'step'", alias="s")
    + _HELD.format(where="kind = 'pass'", alias="p")
)
MIN_SHARE = 0.01  # "non-matmul kernels above 1 % of the time"
ATTENTION_CLASS = "(?i)attention|attn"

# Range names, as data.
SEPARATOR = " > "
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
        steps = self.fact("bool_or(step_region = 'measured')")
        step = "step_region = 'measured'" if steps else "region = 'measured'"
        forward = "pass_region = 'measured' AND pass_direction = 'forward'"
        scopes = {"forward": forward, "step": step}
        # warm-up work is left out, unless the measured region is warm-up work itself
        warm = self.fact(
            f"coalesce(sum(dur_ns) FILTER (WHERE region = 'measured' AND {WARMUP}), 0) >= 0.5 * "
            "coalesce(sum(dur_ns) FILTER (WHERE region = 'measured'), 0) "
            "AND bool_or(region = 'measured')"
        )
        not_warm = "true" if warm else f"NOT {WARMUP}"
        scopes = {name: f"({where}) AND {not_warm}" for name, where in scopes.items()}
        for region in ("measured", "warmup"):
            if self.fact(f"bool_or(pass_region = '{region}' AND pass_direction = 'backward')"):
                in_steps = self.fact(f"bool_or(step_region = '{region}')")
                place = "step_region" if in_steps else "region"
                both = (
                    f"((pass_region = '{region}' AND pass_direction IN ('forward', 'backward')) "
                    f"OR (phase = 'loss' AND {place} = '{region}'))"
                )
                scopes["forward_backward"] = (
                    f"{both} AND {not_warm}" if region == "measured" else both
                )
                break
        return {
            name: scopes[name] for name in ("forward", "forward_backward", "step") if name in scopes
        }

    def forward_passes(self) -> int | None:
        forward = self.scopes()["forward"]
        instances = f"SELECT DISTINCT device_id, pid, pass_index FROM ops WHERE {forward}"
        return self.value(f"SELECT count(*) FROM ({instances})") or None

    def passes(self, where: str) -> int | None:
        steps = (
            f"SELECT DISTINCT device_id, pid, step_index FROM ops WHERE {where} "
            "AND step_index IS NOT NULL"
        )
        return self.value(f"SELECT count(*) FROM ({steps})") or None

    def leaders(self, where: str) -> list[tuple[str, int, int]]:
        """The two kernels (by name, graph replays aside) with the most time: name, calls, ns."""
        return [
            (name, int(calls), int(ns))
            for name, calls, ns in self.rows(
                f"SELECT name, count(*), sum(dur_ns) FROM ops WHERE {where} AND {KERNEL} "
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

    def attention_ranges(self, step: str, only: str = "true") -> tuple[int, int] | None:
        """(softmax ns, matmul ns) from the user's ranges around attention, of the operations
        where `only`; None without such ranges."""
        paths = self.rows(
            f"SELECT range_path, sum(dur_ns) FILTER (WHERE {only}) FROM ops WHERE {step} "
            "AND range_path IS NOT NULL GROUP BY range_path"
        )
        named = [(user_names(path), int(ns or 0)) for path, ns in paths]
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
    for table, name in (("ops", "raw_ops"), ("by_range", "by_range"), ("structure", "structure")):
        file = report.out / f"{table}.parquet"
        db.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{file}')")
    db.execute(PLACED)
    db.execute("CREATE VIEW ops AS SELECT * FROM raw_ops JOIN placed USING (op_id)")
    yield report, Reference(db)
    db.close()


def answer(report: Reported, name: str) -> dict[str, Any]:
    return report.answers["answers"][name]


@pytest.mark.slow
def test_scopes_are_the_documented_operations(profile: tuple[Reported, Reference]) -> None:
    report, ref = profile
    scopes = ref.scopes()
    assert list(answer(report, "matmul_share")["scopes"]) == list(scopes)
    for scope, where in scopes.items():
        facts = report.answers["scopes"][scope]
        assert facts["ops"] == ref.value(f"SELECT count(*) FROM ops WHERE {where}")
        assert facts["time_ns"] == ref.total(where)


@pytest.mark.slow
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
            f"SELECT name, count(*), sum(dur_ns) FROM ops WHERE {other} AND {KERNEL} "
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
    kernels: int | None
    if ref.value(f"SELECT count(*) FROM ops WHERE {step} AND {in_module}"):
        source: str | None = "modules"
        softmax = ref.total(f"{step} AND category = 'softmax' AND {in_module}")
        matmul = ref.total(f"{step} AND (category = 'attention' OR ({MATMUL} AND {in_module}))")
        kernels = matmul
    else:
        times = ref.attention_ranges(step)
        source = "ranges" if times else None
        softmax, matmul = times or (None, None)  # no attention source: unknown, not 0
        kernels = (ref.attention_ranges(step, MATMUL) or (0, None))[1]
    assert got["attention_source"] == source
    # The kernel rows: softmax kernels against the attention matmuls' kernels.
    every = got["by_kernel_category"]["time"]
    if source is None:
        assert every["ratio"] is None and every["unknown"]
    else:
        assert every["matmul_ns"] == kernels
        if fused and not softmax_all:  # softmax inside fused kernels: unknown, not 0
            assert every["softmax_ns"] is None and every["ratio"] is None and every["unknown"]
        else:
            assert every["softmax_ns"] == softmax_all
            assert every["ratio"] == pytest.approx(ratio(softmax_all, kernels))
    attention = got["attention"]["time"]
    hidden = source is not None and fused and not softmax
    assert (attention["softmax_ns"], attention["matmul_ns"]) == (
        None if hidden else softmax,
        matmul,
    )
    assert attention["matmul_kernel_ns"] == (kernels if source else None)
    if source is None or (fused and not softmax):
        assert attention["ratio"] is None and attention["unknown"]
    else:
        assert attention["ratio"] == pytest.approx(ratio(softmax, matmul))
