"""PyTorch operator range names of every version: fields in any order, shapes from `sizes` only.

Newer PyTorch writes `aten::addmm, seq = 12, op_id = 88980, sizes = [[768], [2048,
768], [768, 768]], input_op_ids = [(88976,0), (88977,0)]`; older versions wrote
`aten::addmm, seq = 12, sizes = [[..]]` or `..., stashed seq = 12`. The corpus
tests read two real exports made with shape-recording operator ranges and
check FLOPs and the report's shape table against an independent parse of the
raw NVTX names.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsysmap.attribution.attribute import attribute
from nsysmap.attribution.labels import (
    OPERATOR_CALL_FIELDS,
    OPERATOR_RANGE,
    name_labels,
    operator_ranges,
    without_call_fields,
)
from nsysmap.flops.aten_flops import with_shape_flops
from nsysmap.flow.verbs import load_profile
from nsysmap.report.operator_shapes import shapes_table
from tests.corpus import CORPUS, connect
from tests.frames import Frames

ADDMM_SIZES = "[[768], [2048, 768], [768, 768]]"
OPERATOR_NAMES = [
    (
        f"aten::addmm, seq = 12, op_id = 88980, sizes = {ADDMM_SIZES}, "
        "input_op_ids = [(88976,0), (88977,0)]",
        ("aten::addmm", 12, False, ADDMM_SIZES),
    ),
    (
        f"aten::addmm, op_id = 88980, input_op_ids = [(88976,0)], sizes = {ADDMM_SIZES}, seq = 3",
        ("aten::addmm", 3, False, ADDMM_SIZES),
    ),
    (
        f"aten::mm, sizes = {ADDMM_SIZES}, stashed seq = 7, op_id = 5",
        ("aten::mm", 7, True, ADDMM_SIZES),
    ),
    (
        "aten::addmm, seq = 12, sizes = [[8, 768], [768, 2304], []]",
        ("aten::addmm", 12, False, "[[8, 768], [768, 2304], []]"),
    ),
    ("aten::empty_strided, op_id = 993181", ("aten::empty_strided", None, None, None)),
    ("aten::mm, stashed seq = 12", ("aten::mm", 12, True, None)),
    (
        "aten::cat, seq = 4, op_id = 9, sizes = [[[2, 3], [2, 3]], []], "
        "input_op_ids = [(1,0), (2,0)]",
        ("aten::cat", 4, False, "[[[2, 3], [2, 3]], []]"),
    ),
    (
        "aten::einsum, op_id = 22563, sizes = [[], [4, 512, 768], [768, 768], []], "
        "input_op_ids = [(0,-1), (22539,0), (22540,0), (0,-1)]",
        ("aten::einsum", None, None, "[[], [4, 512, 768], [768, 768], []]"),
    ),
]


@pytest.mark.parametrize(("name", "expected"), OPERATOR_NAMES)
def test_operator_fields_in_any_order(name, expected):
    columns = ["lbl_aten_op", "lbl_seq", "lbl_stashed", "lbl_shapes"]
    assert name_labels(pl.Series([name]), columns).row(0) == expected


def test_call_fields_are_cut_exactly_as_the_pattern_removes_them():
    """The byte cut of `without_call_fields` equals the regular-expression replacement,
    for non-ASCII names, fields over several lines, nulls and names without fields."""
    names = pl.Series(
        [name for name, _ in OPERATOR_NAMES]
        + [
            "käfer::op, seq = 4, sizes = [[2]]",
            "aten::add, op_id = 1\n, sizes = [[1]]",
            "nsysmap:module:h.0 (Block), seq = ",
            "my, range, op_id = 3",
            "seq = 5",
            "",
            None,
        ]
    )
    expected = names.str.replace(OPERATOR_CALL_FIELDS, "")
    assert without_call_fields(names).to_list() == expected.to_list()
    assert without_call_fields(names)[0] == "aten::addmm"


# Pieces of range names: operators, autograd nodes, other libraries' functions, user
# names, and PyTorch's call fields in any order.
_HEADS = [
    "aten::addmm",
    "aten::_softmax",
    "MmBackward0",
    "NativeLayerNormBackward",
    "autograd::engine::evaluate_function: MmBackward0",
    "torch::autograd::AccumulateGrad",
    "FSDP::pre_forward (blocks.3)",
    "KernelExecutor::runFusion",
    "fusion_executor::allocations::allocateOutputs",
    "c10d::allreduce_",
    "nsysmap:bwd:Linear:h.0.mlp",
    "my Backward pass",
    "Backward0",
    "käfer::op",
    "aten::foo:",  # one colon at its end: the comma of a call field completes `:[^:]`
    "aten::a_B:",
    "",
]
_FIELDS = [", seq = 12", ", stashed seq = 7", ", op_id = 88", ", sizes = [[2, 3]]", ", x = 1"]


@given(
    st.lists(
        st.tuples(st.sampled_from(_HEADS), st.lists(st.sampled_from(_FIELDS), max_size=3)),
        min_size=1,
        max_size=12,
    ),
    st.booleans(),
)
@settings(max_examples=200, derandomize=True, deadline=None)
def test_operator_ranges_are_the_names_the_pattern_finds_without_call_fields(parts, null):
    """`operator_ranges` cuts the call fields only from names holding "Backward": it must
    find exactly the names OPERATOR_RANGE finds once the fields are removed."""
    names = pl.Series([head + "".join(fields) for head, fields in parts] + ([None] if null else []))
    expected = names.str.replace(OPERATOR_CALL_FIELDS, "").str.contains(OPERATOR_RANGE)
    assert operator_ranges(names).to_list() == expected.to_list()


def test_operator_ranges_find_a_backward_node_only_without_its_fields():
    names = pl.Series(["MmBackward0, stashed seq = 3", "MmBackward0 again", "aten::mm, seq = 1"])
    assert operator_ranges(names).to_list() == [True, False, True]
    assert names.str.contains(OPERATOR_RANGE).to_list() == [False, False, True]


def test_repeated_calls_with_new_style_names_group_and_count_flops():
    """Three addmm calls, each its own op_id and input_op_ids, one kernel each."""
    f = Frames()
    for i in range(3):
        name = (
            f"aten::addmm, seq = {12 + i}, op_id = {88980 + 10 * i}, sizes = {ADDMM_SIZES}, "
            f"input_op_ids = [({88976 + 10 * i},0), ({88977 + 10 * i},0)]"
        )
        f.range(1, name, 10 * i, 10 * i + 5)
        f.kernel(1, 10 * i + 1, "ampere_sgemm_128x64_tn")
    ops = with_shape_flops(attribute(f.profile()))
    assert ops["input_shapes"].to_list() == [ADDMM_SIZES] * 3
    assert ops["matmul_flop"].to_list() == [2 * 2048 * 768 * 768] * 3
    assert ops["other_flop_estimate"].to_list() == [2048 * 768] * 3  # the bias
    table = shapes_table(ops)
    assert table.select("aten_op", "input_shapes", "calls").rows() == [
        ("aten::addmm", ADDMM_SIZES, 3)
    ]


# ------------------------------------------------------------------ real exports

REAL = CORPUS.parent / "real"
EXPORTS = (
    "cs336a2_small_fwd_emitnvtx_shapes_a100.sqlite",
    "cs336a2_small_fwdbwd_emitnvtx_shapes_a100.sqlite",
)
# Operator ranges that launched a kernel: (name, number of kernels), from raw SQL.
_LAUNCHING_RANGES = """
SELECT coalesce(n.text, s.value) AS name, count(k.correlationId)
FROM NVTX_EVENTS n
LEFT JOIN StringIds s ON s.id = n.textId
JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
  ON r.globalTid = n.globalTid AND r.start >= n.start AND r.start < n."end"
JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
WHERE coalesce(n.text, s.value) LIKE 'aten::bmm,%'
GROUP BY n.rowid
"""


def _export(name: str) -> Path:
    path = REAL / name
    if not path.is_file():
        pytest.skip(f"{name} is not in the corpus at {REAL}")
    return path


def _sizes(name: str) -> str:
    """The `sizes = [...]` field, cut out by counting brackets (not by nsysmap's regex)."""
    start = name.index("sizes = ") + len("sizes = ")
    depth = 0
    for end, char in enumerate(name[start:], start):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth == 0:
            return name[start : end + 1]
    raise ValueError(name)


def _bmm_flop(sizes: str) -> int:
    (b, m, k), (b2, k2, n) = json.loads(sizes)
    assert (b, k) == (b2, k2)
    return 2 * b * m * k * n


def _independent_bmm_calls(path: Path) -> Counter:
    """sizes -> calls of aten::bmm ranges that launched at least one kernel."""
    with connect(path) as conn:
        rows = conn.execute(_LAUNCHING_RANGES).fetchall()
    return Counter(_sizes(name.decode()) for name, kernels in rows if kernels)


@pytest.fixture(scope="module", params=EXPORTS)
def real_export(request) -> tuple[Path, pl.DataFrame]:
    path = _export(request.param)
    return path, with_shape_flops(attribute(load_profile(path)))


@pytest.mark.corpus
def test_matmul_flops_come_from_sizes(real_export):
    path, ops = real_export
    calls = _independent_bmm_calls(path)
    expected = sum(_bmm_flop(sizes) * n for sizes, n in calls.items())
    bmm = ops.filter(pl.col("aten_op") == "aten::bmm")
    assert bmm["matmul_flop"].sum() == expected > 0
    # Every matmul FLOP of these exports is a bmm's (einsum and matmul call bmm).
    assert ops["matmul_flop"].sum() == expected
    assert not ops["input_shapes"].drop_nulls().str.contains("input_op_ids").any()


@pytest.mark.corpus
def test_the_shape_table_shows_each_operator_and_shapes_once_with_its_calls(real_export):
    path, ops = real_export
    table = shapes_table(ops)
    keys = ["module", "direction", "aten_op", "input_shapes"]
    assert table.select(keys).is_duplicated().sum() == 0
    bmm = table.filter(pl.col("aten_op") == "aten::bmm")
    got = Counter()
    for shapes, calls in bmm.select("input_shapes", "calls").iter_rows():
        got[shapes] += calls
    assert got == _independent_bmm_calls(path)
    # A handful of distinct shapes per direction (forward or backward, from the
    # phase where no module says it), not one row per call.
    assert (bmm.group_by("direction").len()["len"] <= 12).all()
    assert bmm.height < bmm["calls"].sum() / 10
