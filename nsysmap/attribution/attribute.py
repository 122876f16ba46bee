"""Attribution: every operation to the step, phase, module and range that launched it.

The operations are the profile's `ops`: GPU kernels, copies and memsets, or
the CPU operators of a torch.profiler trace without device events (each one
"launched" by itself, on its own thread).

The chain, each link a vectorised lookup:

1. op ⋈ launch call on (pid, correlation_id)                 -> launching thread, time
2. launch time -> innermost range on that thread              -> range, path, depth
3. launch time -> innermost step / phase / module / aten range on that thread
4. step or phase still unknown (e.g. backward kernels launched from the autograd
   thread) -> the innermost step / phase range of the same *process* open at the
   launch time, whatever thread opened it:

       main thread      |----- nsysmap:phase:backward -----|
       autograd thread      |-bwd c_fc-|  |-bwd c_attn-|
       launch                    ^ kernel: module c_fc (own thread), phase backward (process)

5. module still unknown and the aten range is a backward op with `stashed seq = N`
   -> the module around the forward op with `seq = N` in the same process,
   direction backward.
6. inside a warm-up range (found like a phase, steps 3 and 4) -> `warmup` true;
   step and phase stay those of the ranges around it (a warm-up step's
   `Forward` range still gives phase forward).
7. a kernel of a torch.compile'd graph -> the module Inductor compiled it from
   (`nsysmap.attribution.compiled_modules`, from the capture's compiled.json).
8. step or phase still unknown -> what PyTorch records anyway: autograd's
   thread and node ranges, module calls, optimizer kernels
   (`nsysmap.attribution.recorded_steps`, over all operations before the chunks);
   `step_source` / `phase_source` say which ("range" or "records").

No operation is dropped: `attribution` says how far the chain got
("range", "other_thread", "no_range", "no_launch", "ambiguous_launch").

How: `nsysmap.attribution.locate` finds range positions for all operations at once
(as-of joins and parent climbs, `nsysmap.intervals.forest`); this module turns them
into names and labels a chunk of operations at a time, so that a caller can
write the OPS rows of a large profile chunk by chunk (`attribute_chunks`).
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from nsysmap.attribution.categories import category_expr
from nsysmap.attribution.compiled_modules import apply_compiled, compiled_context
from nsysmap.attribution.labels import name_labels
from nsysmap.attribution.launch_rows import call_rows
from nsysmap.attribution.locate import locate, queries
from nsysmap.attribution.paths import range_paths
from nsysmap.attribution.record_evidence import evidence
from nsysmap.attribution.recorded_steps import record_labels
from nsysmap.attribution.rules import BUILTIN, NameRules
from nsysmap.attribution.scope import ANCHORS, WARMUP, Scope, thread_keys
from nsysmap.core import schemas
from nsysmap.core.launch_keys import ambiguous_keys, ambiguous_launches, call_key, first_calls
from nsysmap.core.profile import NestedProfile, Profile
from nsysmap.intervals.preorder import Preorder


def attribute(profile: NestedProfile, rules: NameRules = BUILTIN) -> pl.DataFrame:
    """One OPS row per operation of `profile` (nested by `normalise`).

    `rules` read step and phase names (nsysmap.attribution.rules).
    """
    return pl.concat(attribute_chunks(profile, chunk_rows=None, rules=rules))


def attribute_chunks(
    profile: NestedProfile,
    *,
    chunk_rows: int | None,
    rules: NameRules = BUILTIN,
    launches: list[pl.DataFrame] | None = None,
    preorders: list[Preorder | None] | None = None,
) -> Iterator[pl.DataFrame]:
    """The OPS rows of `profile` in op_id order, `chunk_rows` rows at a time (None: one chunk).

    The ranges are searched once for all operations; names, labels and range
    paths are materialised one chunk at a time. `launches`, when given, gets
    the launch-call durations the join with the launch calls found
    (`launch_durations`) before the first chunk: the waits tables read them
    (nsysmap.waits.tables) rather than join the API calls again. `preorders`,
    when given, gets the ranges in nesting pre-order as the search sorted them
    (nsysmap.intervals.preorder; None where it did not), which by_range reads
    rather than sort them again.
    """
    ops = _with_graphs(_with_launches(profile.ops, profile.api_calls), profile.graph_links)
    if launches is not None:
        launches.append(launch_durations(ops))
    if not ops["op_id"].is_sorted():
        ops = ops.sort("op_id")
    n, captures = ops.height, ops.select("pid", tid="capture_tid", launch_start_ns="capture_ns")
    has_captures = captures["launch_start_ns"].is_not_null().any()
    threads = ops.select("pid", "tid")  # launching threads, then capturing ones when any
    if has_captures:
        threads = pl.concat([threads, captures.select("pid", "tid")])
    keys = None if profile.ranges.is_empty() else thread_keys(profile.ranges, threads)
    scope, found, captured = None, _nothing_found(n), None
    if keys is not None:
        scope = Scope.of(profile.ranges, keys[0], rules)
        found = locate(scope, queries(ops, keys[1].slice(0, n)), n)
        if has_captures:
            captured = locate(scope, queries(captures, keys[1].slice(n, n)), n)
    if preorders is not None:
        preorders.append(None if scope is None else scope.preorder)
    compiled = compiled_context(profile) if scope is not None else None
    rank = pl.lit(_rank(profile), pl.Int64).alias("rank")
    category = _categories(ops)
    records = record_labels(evidence(ops, found, scope, profile.threads, category))
    step = chunk_rows or max(n, 1)
    for first in range(0, max(n, 1), step):
        chunk, at_capture = ops.slice(first, step), None
        if captured is not None:
            at_capture = captured.slice(first, step)
        values = _values(chunk, found.slice(first, step), scope, at_capture)
        values = values.with_columns(
            category.slice(first, step), *records.slice(first, step).get_columns()
        )
        yield _finish(apply_compiled(values, compiled).with_columns(rank))


def _rank(profile: Profile) -> int | None:
    """The rank the reader found (torch.profiler's distributedInfo), else None."""
    value = profile.meta_value("rank")
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


def _nothing_found(n_ops: int) -> pl.DataFrame:
    """No ranges (or no usable thread ids): nothing is found for any op."""
    nulls = {a: pl.repeat(None, n_ops, dtype=pl.UInt32, eager=True) for a in ANCHORS}
    return pl.DataFrame({**nulls, "projected": pl.repeat(False, n_ops, eager=True)})


def _values(
    ops: pl.DataFrame, found: pl.DataFrame, scope: Scope | None, at_capture: pl.DataFrame | None
) -> pl.DataFrame:
    """`ops` with range, step, phase, module, direction, aten op and shapes.

    `at_capture` (positions found at the capture points of CUDA graph ops)
    gives module, direction, aten op and shapes first, and capture_range_path.
    """
    columns = _labels(found, scope) if scope is not None else _no_labels(ops.height)
    capture_path = pl.repeat(None, ops.height, dtype=pl.String, eager=True)
    if at_capture is not None and scope is not None:
        captured = _labels(at_capture, scope)
        capture_path = captured["range_path"]
        columns = columns.with_columns(
            pl.when(captured[pair[0]].is_not_null())
            .then(captured[c])
            .otherwise(columns[c])
            .alias(c)
            for pair in _FROM_CAPTURE
            for c in pair
        )
    columns = columns.with_columns(capture_range_path=capture_path)
    out = pl.concat([ops, columns], how="horizontal")
    is_cpu = pl.col("kind") == "cpu_op"
    return out.with_columns(
        pl.when(is_cpu).then(pl.col("name")).otherwise(pl.col("a_op")).alias("aten_op"),
        pl.coalesce("input_shapes", "a_shapes").alias("input_shapes"),
        projected=found["projected"],
    )


def _labels(found: pl.DataFrame, scope: Scope) -> pl.DataFrame:
    ranges = scope.ranges
    module = found["module"]
    inner = _coalesce(found["inner"], found["other"])  # none on its thread: the one taken
    aten = name_labels(
        ranges["name"].gather(found["aten"]), ["lbl_aten_op", "lbl_direction", "lbl_shapes"]
    )
    own = scope.labels(module, ["lbl_module", "lbl_module_class", "lbl_direction"])
    seq = scope.labels(found["seq_module"], ["lbl_module", "lbl_module_class"])
    return pl.DataFrame(
        {
            "range_id": ranges["range_id"].gather(inner),
            "range_name": ranges["name"].gather(inner),
            "range_path": range_paths(scope.parent, ranges["name"], ranges["depth"], inner),
            "range_depth": ranges["depth"].gather(inner),
            "other_thread_range_id": ranges["range_id"].gather(found["other"]),
            "step": scope.label(found["step"], "lbl_step"),
            "phase": scope.label(found["phase"], "lbl_phase"),
            "warmup": found[WARMUP].is_not_null(),
            "module": _coalesce(own["lbl_module"], seq["lbl_module"]),
            "module_class": _coalesce(own["lbl_module_class"], seq["lbl_module_class"]),
            "direction": _coalesce(
                aten["lbl_direction"], own["lbl_direction"], _backward_where(found["seq_module"])
            ),
            "a_op": aten["lbl_aten_op"],
            "a_shapes": aten["lbl_shapes"],
        }
    )


# What an op of a CUDA graph takes from where it was captured rather than replayed
# (step and phase stay those of the replay: capture often runs in a warm-up step).
# Each group is taken whole from the capture when its first column is known there.
_FROM_CAPTURE = (("module", "module_class"), ("direction",), ("a_op", "a_shapes"))


def _with_graphs(ops: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """Ops with graph_id, graph_node_id and capture point (null outside CUDA graphs)."""
    if links.is_empty():
        nulls = ("graph_id", "graph_node_id", "capture_tid", "capture_ns")
        return ops.with_columns(pl.lit(None, pl.Int64).alias(c) for c in nulls)
    return ops.join(links, on="op_id", how="left", maintain_order="left")


def _no_labels(n_ops: int) -> pl.DataFrame:
    labelled = {c: schemas.OPS[c] for c in _LABELLED}
    schema = schemas.declare({**labelled, "a_op": pl.String, "a_shapes": pl.String})
    return pl.DataFrame(schema=schema).clear(n_ops).with_columns(warmup=pl.lit(False))


_LABELLED: tuple[str, ...]
_LABELLED = ("range_id", "range_name", "range_path", "range_depth", "other_thread_range_id")
_LABELLED += ("step", "phase", "warmup")
_LABELLED += ("module", "module_class", "direction")


def _backward_where(seq_module: pl.Series) -> pl.Series:
    """ "backward" where the module came through a backward node's `stashed seq` (rule 5)."""
    return pl.select(pl.when(seq_module.is_not_null()).then(pl.lit("backward"))).to_series()


def _coalesce(*series: pl.Series) -> pl.Series:
    return pl.select(pl.coalesce(series)).to_series()


def _categories(ops: pl.DataFrame) -> pl.Series:
    """Each op's kernel category (see nsysmap.attribution.categories), in row order.

    The rules run once per distinct (kind, name, short_name); rows find theirs
    through integer codes of the names, not by hashing long names again.
    """
    codes = ops.select(
        k=pl.col("kind").to_physical(),
        n=pl.col("name").cast(pl.Categorical).to_physical(),
        s=pl.col("short_name").cast(pl.Categorical).to_physical(),
    )
    first = codes.with_row_index("_row").unique(["k", "n", "s"], keep="first")
    distinct = ops[first["_row"]].select(
        category=category_expr(pl.col("kind"), pl.col("name"), pl.col("short_name"))
    )
    rules = pl.concat([first.drop("_row"), distinct], how="horizontal")
    joined = codes.join(
        rules, on=["k", "n", "s"], how="left", nulls_equal=True, maintain_order="left"
    )
    return joined["category"]


def launch_durations(ops: pl.DataFrame) -> pl.DataFrame:
    """(op_id, pid, correlation_id, launch_start_ns, launch_ns, launch_api) of the
    operations of `ops` (`_with_launches`) with a launch call."""
    launched = ops.filter(pl.col("launch_end_ns").is_not_null())
    launch_ns = pl.col("launch_end_ns") - pl.col("launch_start_ns")
    key = ("pid", "correlation_id", "launch_start_ns")
    return launched.select("op_id", *key, launch_ns=launch_ns, launch_api="launch_api")


def _with_launches(ops: pl.DataFrame, api_calls: pl.DataFrame) -> pl.DataFrame:
    """`ops` with the launching call's tid, api name, start and end (left join; the end
    is not an OPS column: `launch_durations`).

    Of calls sharing (pid, correlation_id), the one `first_calls` keeps
    (nsysmap/core/launch_keys.py: the one that started first). The calls are
    joined as they are first: when no operation finds two (the readers drop
    duplicates, so nearly always), that is the join of the kept calls, and
    the calls need not be de-duplicated. Where calls that differ share an id,
    the operations whose launch that makes ambiguous (`ambiguous_launches`)
    are given none, and `launch_ambiguous` marks them.
    """
    calls = api_calls.filter(pl.col("correlation_id").is_not_null())
    joined = _launch_join(ops, calls)
    if joined.height != ops.height:
        joined = _launch_join(ops, calls.filter(first_calls(calls)))
    ambiguous = ambiguous_launches(
        joined, ambiguous_keys(calls), pl.col("launch_start_ns").is_not_null()
    )
    if not ambiguous.any():
        return joined.with_columns(ambiguous)
    unknown = ("tid", "launch_api", "launch_start_ns", "launch_end_ns")  # not guessed
    return joined.with_columns(ambiguous).with_columns(
        pl.when(~pl.col("launch_ambiguous")).then(pl.col(c)).alias(c) for c in unknown
    )


def _launch_join(ops: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """`ops` left-joined with `calls` on (pid, correlation_id): a row per match (by an
    array lookup where nsysmap.attribution.launch_rows can, else by a join)."""
    launches = calls.select(
        "pid",
        "correlation_id",
        "tid",
        pl.col("api_name").alias("launch_api"),
        pl.col("start_ns").alias("launch_start_ns"),
        pl.col("end_ns").alias("launch_end_ns"),
    )
    rows = call_rows(calls, ops)
    if rows is not None:
        found = launches.drop("pid", "correlation_id").select(pl.all().gather(rows))
        return pl.concat([ops, found], how="horizontal")
    key = call_key(calls, ops)
    if key is None:
        return ops.join(launches, on=["pid", "correlation_id"], how="left", maintain_order="left")
    joined = ops.with_columns(_k=key).join(
        launches.with_columns(_k=key).drop("pid", "correlation_id"),
        on="_k",
        how="left",
        maintain_order="left",
    )
    return joined.drop("_k")


# The op's range is on its launching thread: it has one, and it is not the one taken
# from another thread (ops with no range of their own take that one, `_labels`).
_on_own_thread = pl.col("range_id").is_not_null() & pl.col("range_id").ne_missing(
    pl.col("other_thread_range_id")
)


def _finish(ops: pl.DataFrame) -> pl.DataFrame:
    """Attribution status, then the declared OPS columns."""
    status = (
        pl.when(pl.col("launch_ambiguous"))
        .then(pl.lit("ambiguous_launch"))
        .when(pl.col("launch_start_ns").is_null())
        .then(pl.lit("no_launch"))
        .when(_on_own_thread)
        .then(pl.lit("range"))
        .when(pl.col("projected"))
        .then(pl.lit("other_thread"))
        .otherwise(pl.lit("no_range"))
    )
    out = ops.with_columns(status.alias("attribution"))
    return schemas.conform(out.select(schemas.OPS.names()), schemas.OPS, "ops")
