"""Where people read the findings: report.md's first section and answers.json, the terminal
summary's top three, and `nsysmap diff`'s check of the estimated against the measured saving.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from nsysmap.diff.fix_check import TOLERANCE, check, check_lines, judged
from nsysmap.report.build import build_report
from nsysmap.report.fix_first import TITLE
from nsysmap.report.report_files import read_run
from tests.cli_runner import invoke, nsysmap_cli
from tests.findings_plans import V100, K, Plan, export

MS = 1_000_000
EW = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>()"
GEMM = "ampere_sgemm_128x64_tn"
FUSED = K("void multi_tensor_apply_kernel<TensorListMetadata<4>>()", 0.4, phase="optimizer")
PER_PARAMETER = [K(GEMM, 5.0), *[K(EW, 0.01, phase="optimizer", gap=0.02)] * 40]


def attributed(plan: Plan, root: Path, name: str) -> Path:
    """`plan` exported and attributed into `root/name`: the output directory."""
    path = export(plan, root / f"{name}.sqlite")
    assert nsysmap_cli(["attribute", path, "-o", root / name, "--quiet"]) == 0
    return root / name


# An A100 run with fp32 GEMMs, launch-bound work, a synchronisation, a synchronous copy,
# a wait for data and a per-parameter optimizer: more findings than the top three.
A100_RUN = [
    K("[CUDA memcpy HtoD]", 0.5, phase="data", copy=1, api="cudaMemcpy_v3020"),
    K(GEMM, 5.0),
    *[K(EW, 0.01, gap=0.05)] * 40,
    K(GEMM, 1.0, gap=1.0, sync=True),
    *PER_PARAMETER[1:],
]


@pytest.fixture(scope="module")
def a100_run(tmp_path_factory) -> Path:
    return attributed(Plan(A100_RUN), tmp_path_factory.mktemp("a100"), "run")


@pytest.mark.slow
def test_report_opens_with_what_to_fix_first_from_the_answer(a100_run):
    result = build_report(read_run(a100_run))
    answer = result.answers["answers"]["findings"]
    table = pl.read_parquet(a100_run / "findings.parquet")
    assert answer["unknown"] is None
    assert [r["finding_key"] for r in answer["findings"]] == table["finding_key"].to_list()
    assert {r["rule"] for r in answer["findings"]} >= {"fp32_gemm", "per_parameter_optimizer"}
    lines = result.markdown.splitlines()
    first = lines.index(f"## {TITLE}")
    assert first < lines.index("## What this data cannot answer")
    assert next(line for line in lines if line.startswith("## ")) == f"## {TITLE}"
    for row in answer["findings"]:
        details = f"{row['priority']}. **{row['title']}** ({row['place']}): {row['evidence']}."
        assert details in lines


@pytest.mark.slow
def test_an_output_without_findings_says_so(a100_run, tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    for f in a100_run.iterdir():
        if f.name != "findings.parquet":
            (old / f.name).write_bytes(f.read_bytes())
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["tables"]["findings"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    result = build_report(read_run(old))
    answer = result.answers["answers"]["findings"]
    assert answer["findings"] == [] and "output schema 1.11" in answer["unknown"]
    assert f"Unknown: {answer['unknown']}." in result.markdown


@pytest.mark.slow
def test_the_terminal_summary_ends_with_the_top_three(a100_run):
    code, stdout, _ = invoke(
        ["attribute", str(a100_run.with_suffix(".sqlite")), "-o", str(a100_run)]
    )
    assert code == 0
    table = pl.read_parquet(a100_run / "findings.parquet")
    assert table.height > 3
    tail = stdout[stdout.index("What to fix first") :].splitlines()
    numbered = [line for line in tail if re.match(r"  \d+\. ", line)]
    expected = [
        f"  {r['priority']}. {r['title']} ({r['place']})"
        for r in table.head(3).iter_rows(named=True)
    ]
    assert [line.split("): ")[0] + ")" for line in numbered] == expected
    assert f"  ... {table.height - 3} more in findings.parquet" in tail


# ---------------------------------------------------------------- nsysmap diff


@pytest.fixture(scope="module")
def before_after(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A: a per-parameter optimizer (40 kernels of 0.01 ms after 0.02 ms launch gaps: its
    phase 1.18 ms from the first kernel's start); B: one multi-tensor kernel of 0.4 ms instead
    (the phase 0.78 ms shorter, the step 0.8 ms); C: that kernel 0.05 ms only, and a GEMM 3 ms
    shorter outside the phase."""
    root = tmp_path_factory.mktemp("diff")
    a = attributed(Plan(PER_PARAMETER, gpu=V100), root, "a")
    b = attributed(Plan([K(GEMM, 5.0), FUSED], gpu=V100), root, "b")
    quick = K(FUSED.name, 0.05, phase="optimizer")
    c = attributed(Plan([K(GEMM, 2.0), quick], gpu=V100), root, "c")
    return a, b, c


@pytest.mark.slow
def test_a_fixed_finding_is_gone_and_its_saving_within_the_estimate(before_after):
    a, b, _ = before_after
    fixed = check(read_run(a), read_run(b))
    assert fixed is not None
    assert fixed.gone["rule"].to_list() == ["per_parameter_optimizer"]
    assert fixed.still.is_empty() and fixed.new.is_empty()
    assert fixed.estimated_ns == pytest.approx(0.8 * MS, abs=2)
    assert fixed.phase == "optimizer"  # measured where the saving is taken from
    assert fixed.measured_ns == pytest.approx(0.78 * MS, abs=2)
    assert fixed.step[0] - fixed.step[1] == pytest.approx(0.8 * MS, abs=2)
    assert fixed.verdict == "within"
    text = "\n".join(check_lines(fixed))
    assert "gone: #1 per_parameter_optimizer" in text and "within the estimate" in text


@pytest.mark.slow
def test_more_saved_than_estimated_says_something_else_changed(before_after):
    a, _, c = before_after
    fixed = check(read_run(a), read_run(c))
    assert fixed is not None and fixed.verdict == "above"
    assert fixed.measured_ns == pytest.approx(1.13 * MS, abs=2)  # the GEMM is not counted
    assert fixed.step[0] - fixed.step[1] == pytest.approx(4.15 * MS, abs=2)


def test_the_diff_command_prints_the_check(before_after):
    a, b, _ = before_after
    code, stdout, _ = invoke(["diff", str(a), str(b)])
    assert code == 0 and "Saving of the findings gone" in stdout and "within the estimate" in stdout


@pytest.mark.parametrize(
    ("estimated", "measured", "bound", "verdict"),
    [
        (1000, 0, True, "no saving"),
        (1000, -5, False, "no saving"),
        (1000, 400, True, "within"),  # an upper bound: less is within
        (1000, 400, False, "below"),  # an estimate: less than 75 % of it is below
        (1000, 1000 * (1 + TOLERANCE), True, "within"),
        (1000, 1000 * (1 + TOLERANCE) + 1, False, "above"),
    ],
)
def test_verdicts(estimated, measured, bound, verdict):
    assert judged(estimated, measured, bound) == verdict


def test_the_html_evidence_is_escaped_and_names_are_code():
    from nsysmap.report.html.fix_first_chart import evidence_html, fix_first_chart

    row = {
        "priority": 1,
        "title": "A <b>title</b>",
        "place": "GPU 0",
        "evidence": "the range `<script>alert(1)</script>` & more",
        "estimate": "e",
        "overlaps": None,
        "fix": "f()",
        "evidence_rows": "r",
        "doc": "docs/findings.md#x",
        "needs": None,
        "saving_ns_per_step": 2 * MS,
        "saving_share": 0.5,
        "upper_bound": True,
        "confidence": "low",
    }
    answer = {"findings": [row], "rules": "docs/findings.md", "unknown": None}
    page = evidence_html(answer)
    assert "<script>" not in page and "<b>title" not in page
    assert "<code>&lt;script&gt;alert(1)&lt;/script&gt;</code> &amp; more" in page
    assert 'id="finding-1"' in page
    chart = fix_first_chart(answer)
    assert chart is not None and chart.figure["data"][0]["customdata"] == ["#finding-1"]
    assert chart.figure["data"][0]["y"] == ["1. A &lt;b&gt;title&lt;/b&gt;"]
