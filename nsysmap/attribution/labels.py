"""What each range says about step, phase, module and operator, from its name.

Two families of names are understood:

* nsysmap's own ranges (the grammar in `nsysmap.core.range_names`), emitted by
  `instrument/`: steps, phases, module forward/backward calls.
* Foreign styles seen in real profiles: PyTorch's per-operator ranges
  (`emit_nvtx`, `nsys --pytorch`: `aten::addmm, seq = 12, sizes = [[..]]`,
  `stashed seq` on backward), FSDP hook ranges (`FSDP::pre_forward (blocks.3)`),
  and the step and phase names of the rule table in
  `nsysmap.attribution.rules` (`ProfilerStep#3`, `## forward ##`,
  `Optimizer.step#AdamW.step`, `backward pass`, `warmup`, ...: warm-up is
  a mark of its own, `lbl_warmup`, beside step and phase), and
  the module ranges the torch.profiler reader makes from module frames
  (`nn.Module: BertModel_0.BertLayer_3 (BertLayer)`).

`name_labels` gives the `lbl_*` columns for a series of names; all are null when the
name says nothing. Matching is by regular expression only.
"""

from __future__ import annotations

import polars as pl

from nsysmap.attribution.rules import BUILTIN, NameRules
from nsysmap.core.range_names import PREFIX as NSYSMAP
from nsysmap.core.range_names import naming_columns

LABELS = pl.Schema(
    {
        "lbl_step": pl.Int64,
        "lbl_phase": pl.String,
        "lbl_warmup": pl.Boolean,  # the name marks warm-up work (rules.py); null: says nothing
        "lbl_module": pl.String,
        "lbl_module_class": pl.String,
        "lbl_direction": pl.String,
        "lbl_aten_op": pl.String,
        "lbl_seq": pl.Int64,
        "lbl_stashed": pl.Boolean,
        "lbl_shapes": pl.String,
    }
)

ATEN_OP = r"^([A-Za-z_][\w]*::[\w.]+)(?:,|$)"
SEQ = r"(?:^|, )(?:stashed )?seq = (\d+)"
# One field of PyTorch's operator range names. The fields (`seq`, `stashed seq`,
# `op_id`, `sizes`, `input_op_ids`) come in any order and any may be absent:
#   aten::addmm, seq = 12, op_id = 88980, sizes = [[768], [2048, 768], [768, 768]],
#     input_op_ids = [(88976,0), (88977,0)]
# `sizes` is a bracketed list nested up to three deep (a tensor list's shapes).
_BRACKETED = r"\[(?:[^\[\]]|\[(?:[^\[\]]|\[[^\[\]]*\])*\])*\]"
SIZES = rf"(?:^|, )sizes = ({_BRACKETED})"
_SIZES_FIELD = "sizes = "  # where a SIZES match may start: at 0, or after ", "
# The per-call fields PyTorch's operator ranges carry after the operator name
# (`aten::addmm, seq = 12, op_id = 88980, sizes = [...], input_op_ids = [...]`,
# `BmmBackward0, stashed seq = 12, ...`), from the first such field to the end:
# removed, the name is the same for every call of the operator (by_range paths).
# Where those fields start: the text before the first match is the name without them.
OPERATOR_CALL_START = r", (?:stashed seq|seq|op_id|sizes|input_op_ids) = "
OPERATOR_CALL_FIELDS = rf"(?s){OPERATOR_CALL_START}.*$"
# The number in a step range's name (`ProfilerStep#3`, `nsysmap:step:3`, `step 3`):
# by_range paths write it as `*`, so that the ranges of every step group.
STEP_NUMBER = r"\d+(\D*)$"
# PyTorch's operator ranges once OPERATOR_CALL_FIELDS is removed: `aten::addmm`,
# `autograd::engine::evaluate_function: BmmBackward0`, `torch::autograd::AccumulateGrad`,
# `fbgemm::permute_2D_sparse_data`, `BmmBackward0`, FSDP's `FSDP::pre_forward (...)`.
# Namespaces are lowercase and an operator's own name snake_case (or a class's
# CamelCase): a CamelCase namespace or a lowerCamelCase last name is a C++ function's
# range of another library (nvFuser's `KernelExecutor::runFusion`,
# `fusion_executor::allocations::allocateOutputs`; TensorRT's `ExecutionContext::execute`).
OPERATOR_RANGE = (
    r"^(?:FSDP::|(?:[a-z_]\w*::)+(?:[A-Z_]|[a-z0-9](?:[a-z0-9_]|[0-9_][A-Z]+)*"
    r"(?:[^\w:]|:[^:]|$))|\w+Backward\d*$)"
)
# The ranges PyTorch's autograd engine opens around the nodes it runs (on nsys
# exports with emit_nvtx and in torch.profiler traces alike): the engine's
# `autograd::engine::evaluate_function: MmBackward0` (also for
# `torch::autograd::AccumulateGrad`), the node's own `MmBackward0`, and a
# backward operator's `stashed seq`. Work launched inside one is backward work.
AUTOGRAD_NODE = r"^(?:autograd::engine::evaluate_function: |\w+Backward\d*\b)|stashed seq = "
# AUTOGRAD_NODE's three alternatives: two found by literal tests, the third (a node's own
# name) only where the name holds "Backward" (`autograd_nodes`).
_ENGINE_NODE = "autograd::engine::evaluate_function: "
_NODE_NAME = r"^\w+Backward\d*\b"
FSDP_HOOK = r"^FSDP::(pre|post)_(forward|backward) \(([^)]*)\)"
FSDP_SPAN = r"^FSDP (forward|backward) \((.*)\)$"
# Module ranges the torch.profiler reader makes from `nn.Module: Class_N` frames
# (nsysmap.read.torch.torch_modules): `nn.Module: <path> (<class>)`, direction forward.
TRACE_MODULE_PREFIX = "nn.Module: "
TRACE_MODULE = r"^nn\.Module: (\S+) \((\w+)\)$"


def may_name_scope(name: pl.Expr, rules: NameRules = BUILTIN) -> pl.Expr:
    """False for names that certainly give no step, phase or module (a cheap, exact test).

    Those labels come only from nsysmap's own names, FSDP spans and the
    step and phase rules; every other name can at most be an operator.
    """
    scoped = name.str.starts_with(NSYSMAP) | name.str.starts_with("FSDP ")
    scoped = scoped | name.str.starts_with(TRACE_MODULE_PREFIX)
    return (scoped | name.str.contains(rules.any_regex())).fill_null(False)


def name_labels(
    names: pl.Series, columns: list[str] | None = None, rules: NameRules = BUILTIN
) -> pl.DataFrame:
    """The LABELS columns (or some of them) for each of `names`, in order.

    The full set of patterns runs only on names that `may_name_scope`; the
    others get the operator patterns alone (their step, phase and module
    labels are null, their direction is the operator's). `rules` are the
    step and phase name rules (nsysmap.attribution.rules).
    """
    columns = columns or LABELS.names()
    frame = pl.DataFrame({"name": names})
    scoped = frame.select(may_name_scope(pl.col("name"), rules)).to_series()
    rest = _operator_label_exprs(pl.col("name"))
    # The operator is extracted alone here and tested per distinct operator below.
    rest["lbl_aten_op"] = pl.col("name").str.extract(ATEN_OP, 1)
    rest["lbl_shapes"] = pl.lit(None, pl.String)  # per distinct sizes field, below
    # with_columns, not select: literal-only columns still get one row per name.
    out = frame.with_columns(**{c: rest.get(c, pl.lit(None, LABELS[c])) for c in columns})
    out = out.select(columns)
    if "lbl_aten_op" in columns:
        out = out.with_columns(lbl_aten_op=_operators_only(out["lbl_aten_op"]))
    if "lbl_shapes" in columns:
        out = out.with_columns(lbl_shapes=shapes(names))
    if scoped.any():
        rows = scoped.arg_true()
        full = _distinct_labels(frame[rows], columns, rules)
        out = out.with_columns(out[c].scatter(rows, full[c]) for c in columns)
    return out


def _distinct_labels(frame: pl.DataFrame, columns: list[str], rules: NameRules) -> pl.DataFrame:
    """All patterns, run once per distinct name (scoped names repeat every step)."""
    distinct = frame.unique("name")
    labelled = distinct.with_columns(_name_label_exprs(pl.col("name"), rules))
    return frame.join(labelled, on="name", how="left", maintain_order="left").select(columns)


def shapes(names: pl.Series) -> pl.Series:
    """SIZES's group of each name (the same as `str.extract(SIZES, 1)`), the expression
    run once per distinct text from the first `sizes = ` field to the end.

    Operator names differ in every call (`seq`, `op_id`) but their shapes repeat
    (0.28 CPU s over 10^6 names by the expression, 0.1 so). No match starts before
    the first field, so the text from it holds the same first match.
    """
    name = pl.col("name")
    at = (
        pl.DataFrame({"name": names})
        .select(
            pl.when(name.str.starts_with(_SIZES_FIELD))
            .then(0)
            .otherwise(name.str.find(", " + _SIZES_FIELD, literal=True))
        )
        .to_series()
    )
    rows = at.is_not_null().arg_true()
    raw = pl.DataFrame({"raw": names.cast(pl.Binary), "n": names.str.len_bytes() - at})[rows]
    tails = raw.select(tail=pl.col("raw").bin.tail(pl.col("n")).cast(pl.String))
    distinct = tails.unique("tail").with_columns(got=pl.col("tail").str.extract(SIZES, 1))
    got = tails.join(distinct, on="tail", how="left", maintain_order="left")["got"]
    return pl.repeat(None, names.len(), dtype=pl.String, eager=True).scatter(rows, got)


def _operators_only(extracted: pl.Series) -> pl.Series:
    """`_aten_op` of names from ATEN_OP's extracted group: OPERATOR_RANGE is tested once
    per distinct operator, not per name (a few dozen operators among millions of
    ranges; in one expression the extraction ran twice)."""
    distinct = extracted.drop_nulls().unique()
    kept = distinct.filter(distinct.str.contains(OPERATOR_RANGE))
    return pl.select(pl.when(extracted.is_in(kept.implode())).then(extracted)).to_series()


def _aten_op(name: pl.Expr) -> pl.Expr:
    """The operator a PyTorch operator range names (`aten::addmm`); null for any other
    `A::b` name, such as another library's C++ function (OPERATOR_RANGE)."""
    op = name.str.extract(ATEN_OP, 1)
    return pl.when(op.str.contains(OPERATOR_RANGE)).then(op)


def _operator_label_exprs(name: pl.Expr) -> dict[str, pl.Expr]:
    """The labels any name may carry, as `_name_label_exprs` computes them."""
    return {
        "lbl_direction": _aten_direction(name),
        "lbl_aten_op": _aten_op(name),
        "lbl_seq": name.str.extract(SEQ, 1).cast(pl.Int64, strict=False),
        "lbl_stashed": _stashed(name),
        "lbl_shapes": name.str.extract(SIZES, 1),
    }


def _name_label_exprs(name: pl.Expr, rules: NameRules) -> list[pl.Expr]:
    own = naming_columns(name)
    own_cols = {expr.meta.output_name(): expr for expr in own}
    is_module = own_cols["nsm_kind"] == "module"
    trace_module = name.str.extract(TRACE_MODULE, 1)
    return [
        pl.coalesce(own_cols["nsm_step"], rules.step_expr(name)).alias("lbl_step"),
        pl.coalesce(own_cols["nsm_phase"], rules.phase_expr(name)).alias("lbl_phase"),
        pl.when(rules.warmup_expr(name)).then(pl.lit(True)).alias("lbl_warmup"),
        pl.when(is_module)
        .then(own_cols["nsm_module_path"])
        .otherwise(pl.coalesce(name.str.extract(FSDP_SPAN, 2), trace_module))
        .alias("lbl_module"),
        pl.when(is_module)
        .then(own_cols["nsm_module_class"])
        .otherwise(name.str.extract(TRACE_MODULE, 2))
        .alias("lbl_module_class"),
        pl.coalesce(
            own_cols["nsm_direction"],
            name.str.extract(FSDP_SPAN, 1),
            pl.when(trace_module.is_not_null()).then(pl.lit("forward")),
            _aten_direction(name),
        ).alias("lbl_direction"),
        _aten_op(name).alias("lbl_aten_op"),
        name.str.extract(SEQ, 1).cast(pl.Int64, strict=False).alias("lbl_seq"),
        _stashed(name).alias("lbl_stashed"),
        name.str.extract(SIZES, 1).alias("lbl_shapes"),
    ]


def _stashed(name: pl.Expr) -> pl.Expr:
    """True for a backward op's `stashed seq` and for an autograd node's own range with its
    number (`AddmmBackward0, seq = 7`: the node made by forward op 7, as recent PyTorch's
    emit_nvtx names it, with no `stashed seq` inside); False for a forward `seq`; else
    null."""
    node = name.str.contains("Backward", literal=True) & name.str.contains(_NODE_NAME)
    return (
        pl.when(name.str.contains("stashed seq = ", literal=True) | node)
        .then(pl.lit(True))
        .when(name.str.contains(SEQ))
        .then(pl.lit(False))
    )


def _aten_direction(name: pl.Expr) -> pl.Expr:
    """Backward for PyTorch's backward-op ranges (`stashed seq`, `...Backward0`)."""
    backward = name.str.contains("stashed seq = ", literal=True) | name.str.contains(
        r"^(?:autograd::engine::evaluate_function: )?\w+Backward\d*\b"
    )
    return pl.when(backward).then(pl.lit("backward"))


def fsdp_spans(ranges: pl.DataFrame, first_id: int) -> pl.DataFrame:
    """Synthetic module ranges spanning FSDP's pre_ and post_ hook ranges.

    FSDP marks a block's forward with two short ranges, not a span:

        FSDP::pre_forward (blocks.3)  |-|    ...block runs...    |-|  FSDP::post_forward (blocks.3)
        synthetic span                |--------------------------|

    Each pre hook is paired with the next post hook for the same block and
    direction on the same thread. Returned rows follow the RANGES columns,
    kind "synthetic", named "FSDP forward (blocks.3)", ids from `first_id`.
    """
    hooks = (
        ranges.filter(pl.col("name").str.starts_with("FSDP::"))  # FSDP_HOOK's anchor, cheap
        .select(
            "pid",
            "tid",
            "start_ns",
            "end_ns",
            pl.col("name").str.extract_groups(FSDP_HOOK).alias("m"),
        )
        .unnest("m")
        .rename({"1": "when", "2": "direction", "3": "block"})
    )
    hooks = hooks.filter(pl.col("when").is_not_null())
    if hooks.is_empty():
        return ranges.clear()
    keys = ["pid", "tid", "direction", "block"]
    pre = hooks.filter(pl.col("when") == "pre").select([*keys, "start_ns"]).sort("start_ns")
    post = hooks.filter(pl.col("when") == "post").select([*keys, "start_ns", "end_ns"])
    post = post.rename({"start_ns": "post_start_ns"}).sort("post_start_ns")
    spans = pre.join_asof(
        post,
        left_on="start_ns",
        right_on="post_start_ns",
        by=keys,
        strategy="forward",
        check_sortedness=False,
    ).filter(pl.col("end_ns").is_not_null())
    spans = spans.sort(["pid", "tid", "start_ns"]).with_row_index("i")
    return spans.select(
        (pl.col("i").cast(pl.Int64) + first_id).alias("range_id"),
        "pid",
        "tid",
        pl.lit(None, pl.String).alias("domain"),
        pl.format("FSDP {} ({})", "direction", "block").alias("name"),
        "start_ns",
        "end_ns",
        pl.lit("synthetic").alias("kind"),
        pl.lit(None, pl.Int32).alias("depth"),
        pl.lit(None, pl.Int64).alias("parent_id"),
    ).cast(ranges.schema)


def without_call_fields(names: pl.Series) -> pl.Series:
    """`names` with OPERATOR_CALL_FIELDS removed (the same as replacing them by "").

    The fields run to the end of the name, so the name is cut at the first
    OPERATOR_CALL_START: one search and a byte slice, several times faster
    than a regular-expression replacement over millions of names.
    """
    cut = names.str.find(OPERATOR_CALL_START).fill_null(names.str.len_bytes())
    raw = pl.DataFrame({"raw": names.cast(pl.Binary), "cut": cut})
    kept = raw.select(pl.col("raw").bin.head(pl.col("cut")).cast(pl.String))
    return kept.to_series().alias(names.name)


def operator_ranges(names: pl.Series) -> pl.Series:
    """Whether each of `names` is one of PyTorch's operator ranges: OPERATOR_RANGE on the
    name without its call fields (null for null).

    The same as `without_call_fields(names).str.contains(OPERATOR_RANGE)`, with
    the fields cut only where that can change the answer: a name that matches
    with its fields matches without them (the operator name ends at its
    first `, `) unless its operator ends in one `:` (`a::b:, seq = 1`, where
    the comma completes `:[^:]`), and one that does not can match without them
    only through the autograd node alternative (`MmBackward0, stashed seq = 3`);
    so only names holding "Backward" or ":, " are cut (0.6 CPU s over the
    benchmark's 2.9 million ranges the other way, 0.2 this one).
    """
    name = pl.col("name")
    frame = pl.DataFrame({"name": names}).select(
        whole=name.str.contains(OPERATOR_RANGE),
        node=name.str.contains("Backward", literal=True),
        colon=name.str.contains(":, ", literal=True),
    )
    whole = frame["whole"]
    rows = ((frame["node"] & ~whole) | (frame["colon"] & whole)).fill_null(False).arg_true()
    if rows.is_empty():
        return whole.alias(names.name)
    cut = without_call_fields(names.gather(rows)).str.contains(OPERATOR_RANGE)
    return whole.scatter(rows, cut).alias(names.name)


def autograd_nodes(names: pl.Series) -> pl.Series:
    """Whether each of `names` matches AUTOGRAD_NODE (false for null).

    The same test without running a regular expression over every name: the
    engine's prefix and `stashed seq = ` are literal, and a node's own name
    (`MmBackward0`) holds "Backward" (one pass of the expression over all
    2.9 million ranges of the benchmark took 0.3 CPU s, these 0.13).
    """
    name = pl.col("name")
    quick = pl.DataFrame({"name": names}).select(
        sure=name.str.starts_with(_ENGINE_NODE) | name.str.contains("stashed seq = ", literal=True),
        maybe=name.str.contains("Backward", literal=True),
    )
    sure = quick["sure"].fill_null(False)
    rows = (quick["maybe"].fill_null(False) & ~sure).arg_true()
    return sure.scatter(rows, names.gather(rows).str.contains(_NODE_NAME))
