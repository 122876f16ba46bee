"""`nsysmap report` answering from the profile's own ranges where modules say nothing."""

from __future__ import annotations

import json

import polars as pl
import pytest

from devtools.synth import SynthExport
from nsysmap.flow.verbs import analyse, analyse_file
from nsysmap.report.answers import RunData
from nsysmap.report.build import build_report
from nsysmap.report.report_files import read_run
from tests.frames import MS, Frames
from tests.runs import run_data


def _run(f: Frames) -> RunData:
    analysis = analyse(f.profile())
    return run_data(analysis)


def _metric(result, metric: str) -> float | None:
    table = result.tables["report_summary"]
    return table.filter((pl.col("metric") == metric) & (pl.col("run") == "main"))["value"].item()


def _attention_profile() -> Frames:
    """A hand-annotated attention: scores 3 ms, masking 1, softmax 2 + 1, final matmul 4."""
    f = Frames()
    f.range(1, "forward pass", 0, 100)
    f.range(1, "scaled dot product attention", 10, 60)
    f.range(1, "computing attention scores", 11, 20)
    f.kernel(1, 12, "ampere_sgemm_128x64_tn", dur=3)
    f.range(1, "masking", 20, 25)
    f.kernel(1, 21, "elementwise_kernel", dur=1)
    f.range(1, "computing softmax", 25, 40)
    f.range(1, "aten::exp, seq = 4, op_id = 17", 26, 30)
    f.kernel(1, 27, "exp_kernel", dur=2)
    f.kernel(1, 31, "reduce_kernel", dur=1)
    f.range(1, "final matmul", 40, 50)
    f.kernel(1, 41, "ampere_sgemm_128x64_tn", dur=4)
    f.range(1, "aten::matmul, seq = 5, op_id = 18", 52, 58)  # an operator range: not counted
    f.kernel(1, 53, "ampere_sgemm_128x64_tn", dur=5)
    f.range(1, "softmax outside attention", 70, 80)
    f.kernel(1, 71, "softmax_warp_forward", dur=6)
    return f


@pytest.mark.slow
def test_attention_softmax_against_matmul_from_the_users_ranges():
    result = build_report(_run(_attention_profile()))
    assert result.findings.attention_source == "ranges"
    times = result.findings.softmax_time
    assert (times["attention_softmax"], times["attention_matmul"]) == (3 * MS, 7 * MS)
    assert _metric(result, "attention_softmax_to_matmul_time_ratio") == 3 / 7
    assert (
        "| time, attention ranges (whole ranges: every operation in them) "
        "| 3.000 ms | 7.000 ms | 0.429 |" in result.markdown
    )
    assert "from the profile's own ranges" in result.markdown


@pytest.mark.slow
def test_attention_modules_win_over_ranges(tmp_path):
    b = SynthExport()
    b.thread(1, 1, "python")
    b.range(1, 1, 0, 50, "nsysmap:fwd:GPT2Attention:h.0.attn")
    b.range(1, 1, 1, 45, "attention")
    b.range(1, 1, 2, 40, "computing softmax")
    b.launch(1, 1, 3, 4, corr=7)
    b.kernel(1, 0, 7, 4, 6, corr=7, name="softmax_warp_forward")
    b.launch(1, 1, 5, 6, corr=8)
    b.kernel(1, 0, 7, 6, 7, corr=8, name="elementwise_kernel")  # in the range, not softmax
    analyse_file(b.write(tmp_path / "x.sqlite"), tmp_path / "out")
    result = build_report(read_run(tmp_path / "out"))
    assert result.findings.attention_source == "modules"
    assert "| time, attention modules | 2.000 ms |" in result.markdown


@pytest.mark.slow
def test_the_range_section_lists_the_users_ranges_inside_and_own():
    result = build_report(_run(_attention_profile()))
    table = result.tables["report_ranges"]
    attention = table.filter(pl.col("range_path") == "forward pass > scaled dot product attention")
    assert attention.select("calls", "time_ns", "inclusive_ns", "user").row(0) == (
        1,
        0,
        16 * MS,
        True,
    )
    operator = table.filter(pl.col("range_name") == "aten::matmul")
    assert operator["user"].to_list() == [False] and operator["time_ns"].item() == 5 * MS
    assert table["time_ns"].sum() == 22 * MS  # every operation is in a range
    text = result.markdown.split("## Where the time goes: by range")[1]
    assert "| `forward pass > scaled dot product attention` | 1 | 0.000 ms | 16.000 ms |" in text
    assert "Range paths with the most own time:" in text


def test_without_modules_and_ranges_one_line_says_how_to_get_them():
    f = Frames()
    f.kernel(1, 1, "ampere_sgemm_128x64_tn", dur=2)
    result = build_report(_run(f))
    notes = [n for n in result.findings.notes if n.startswith("No modules")]
    assert notes == [
        "No modules and no ranges: nothing says which part of the model launched a kernel. "
        "To get them: `nsysmap run`, NVTX or `record_function` ranges, `emit_nvtx` "
        "(operator ranges)."
    ]
    assert result.findings.attention_source is None
    assert "No operation was launched inside a range." in result.markdown


@pytest.mark.slow
def test_an_output_directory_without_by_range_says_to_attribute_again(tmp_path):
    b = SynthExport()
    b.thread(1, 1, "python")
    b.range(1, 1, 0, 10, "forward")
    b.launch(1, 1, 2, 3, corr=7)
    b.kernel(1, 0, 7, 4, 6, corr=7, name="void gemm()")
    out = tmp_path / "out"
    analyse_file(b.write(tmp_path / "x.sqlite"), out)
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["tables"]["by_range"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = build_report(read_run(out))
    assert "report_ranges" not in result.tables
    assert "run `nsysmap attribute` again for this section" in result.markdown
