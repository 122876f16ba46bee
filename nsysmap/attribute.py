"""Attribution: every GPU operation to the step, phase, module and range that launched it.

The chain, each link a join:

1. GPU op ⋈ launch call on (pid, correlation_id)             -> launching thread, time
2. launch time -> innermost range on that thread              -> range, path, depth
3. launch time -> innermost step / phase / module / aten range on that thread
4. step or phase still unknown (e.g. backward kernels launched from the autograd
   thread) -> the innermost step / phase range of the same *process* open at the
   launch time, whatever thread opened it:

       main thread      |----- nsysmap:phase:backward -----|
       autograd thread      |-bwd c_fc-|  |-bwd c_attn-|
       launch                    ^ kernel: module c_fc (own thread), phase backward (process)

5. module still unknown and the aten range is a backward op with `stashed seq = N`
   -> the module around the forward op with `seq = N` in the same process.

No operation is dropped: `attribution` says how far the chain got
("range", "window", "no_range", "no_launch").
"""

from __future__ import annotations

import polars as pl

from nsysmap import schemas
from nsysmap.categories import categorize
from nsysmap.labels import LABELS, range_labels
from nsysmap.model import Report
from nsysmap.nesting import innermost_at, innermost_timeline, nest_repaired

PATH_SEPARATOR = " > "
# Label families looked up on the launching thread: anchor column -> label that marks it.
THREAD_FAMILIES = {
    "step_rid": "lbl_step",
    "phase_rid": "lbl_phase",
    "module_rid": "lbl_module",
    "aten_rid": "lbl_aten_op",
}


def attribute(report: Report) -> pl.DataFrame:
    """One OPS row per GPU operation of `report` (ranges must be nested)."""
    ranges = range_labels(report.ranges)
    ops = _with_launches(report.gpu_ops, report.api_calls)
    ops = ops.with_columns(_innermost_any(ops, report.ranges).alias("range_id"))
    for anchor, label in THREAD_FAMILIES.items():
        family = ranges.filter(pl.col(label).is_not_null())
        ops = ops.with_columns(_innermost_in(ops, family, ("pid", "tid")).alias(anchor))
    ops = _project_process_windows(ops, ranges)
    ops = _module_via_seq(ops, ranges)
    ops = _resolve_labels(ops, ranges)
    ops = ops.join(_range_paths(report.ranges, ops["range_id"]), on="range_id", how="left")
    return _finish(categorize(ops))


def _with_launches(gpu_ops: pl.DataFrame, api_calls: pl.DataFrame) -> pl.DataFrame:
    """GPU ops with the launching call's tid, api name and start (left join)."""
    launches = (
        api_calls.sort("start_ns", "tid")
        .unique(subset=["pid", "correlation_id"], keep="first", maintain_order=True)
        .select(
            "pid",
            "correlation_id",
            "tid",
            pl.col("api_name").alias("launch_api"),
            pl.col("start_ns").alias("launch_start_ns"),
        )
    )
    return gpu_ops.join(launches, on=["pid", "correlation_id"], how="left")


def _queries(ops: pl.DataFrame, by: tuple[str, ...]) -> pl.DataFrame:
    return ops.select([*by, pl.col("launch_start_ns").alias("t")])


def _innermost_any(ops: pl.DataFrame, nested_ranges: pl.DataFrame) -> pl.Series:
    """Innermost range of any kind on the launching thread (ranges already nested)."""
    by = ("pid", "tid")
    timeline = innermost_timeline(nested_ranges, by=by, id_col="range_id")
    return innermost_at(_queries(ops, by), timeline, by=by, time_col="t")


def _innermost_in(ops: pl.DataFrame, family: pl.DataFrame, by: tuple[str, ...]) -> pl.Series:
    """Innermost range among `family`, grouped by `by`, at each op's launch time."""
    if family.is_empty():
        return pl.Series(values=[None] * ops.height, dtype=pl.Int64)
    nested, _ = nest_repaired(
        family.select("range_id", *by, "start_ns", "end_ns"), by=by, id_col="range_id"
    )
    timeline = innermost_timeline(nested, by=by, id_col="range_id")
    return innermost_at(_queries(ops, by), timeline, by=by, time_col="t")


def _project_process_windows(ops: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """Fill unknown step and phase from the same process's ranges, any thread."""
    out = ops.with_columns(pl.lit(False).alias("projected"))
    for anchor, label in (("step_rid", "lbl_step"), ("phase_rid", "lbl_phase")):
        family = ranges.filter(pl.col(label).is_not_null())
        window = _innermost_in(out, family, ("pid",))
        fill = pl.col(anchor).is_null() & window.is_not_null()
        out = out.with_columns(
            pl.when(fill).then(window).otherwise(pl.col(anchor)).alias(anchor),
            (pl.col("projected") | fill.fill_null(False)).alias("projected"),
        )
    return out


def _module_via_seq(ops: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """Give backward ops (`stashed seq = N`) the module of forward op `seq = N`.

    The innermost range carrying a sequence number on the launching thread is
    the op's autograd node; for a backward node with no module range around
    it, the module is the one around the forward op with the same number in
    the same process.
    """
    seq_ranges = ranges.filter(pl.col("lbl_seq").is_not_null())
    forward = seq_ranges.filter(~pl.col("lbl_stashed"))
    modules = ranges.filter(pl.col("lbl_module").is_not_null())
    if forward.is_empty() or modules.is_empty():
        return ops.with_columns(pl.lit(None, pl.Int64).alias("seq_module_rid"))
    probe = forward.select("pid", "tid", pl.col("start_ns").alias("launch_start_ns"))
    seq_map = (
        forward.select("pid", "lbl_seq", "start_ns")
        .with_columns(_innermost_in(probe, modules, ("pid", "tid")).alias("seq_module_rid"))
        .filter(pl.col("seq_module_rid").is_not_null())
        .sort("start_ns")
        .unique(subset=["pid", "lbl_seq"], keep="first")
        .select("pid", pl.col("lbl_seq").alias("node_seq"), "seq_module_rid")
    )
    nodes = seq_ranges.select(
        pl.col("range_id").alias("seq_rid"),
        pl.col("lbl_seq").alias("node_seq"),
        pl.col("lbl_stashed").alias("node_stashed"),
    )
    linked = (
        ops.with_columns(_innermost_in(ops, seq_ranges, ("pid", "tid")).alias("seq_rid"))
        .join(nodes, on="seq_rid", how="left")
        .join(seq_map, on=["pid", "node_seq"], how="left")
    )
    use = pl.col("module_rid").is_null() & pl.col("node_stashed").fill_null(False)
    return linked.with_columns(
        pl.when(use).then(pl.col("seq_module_rid")).alias("seq_module_rid")
    ).drop("seq_rid", "node_seq", "node_stashed")


def _resolve_labels(ops: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """Turn anchor range ids into step, phase, module, aten op and shapes."""
    labels = ranges.select("range_id", *LABELS.names())

    def take(anchor: str, cols: dict[str, str]) -> pl.DataFrame:
        return labels.select(
            pl.col("range_id").alias(anchor), *(pl.col(k).alias(v) for k, v in cols.items())
        )

    module_cols = {
        "lbl_module": "m_module",
        "lbl_module_class": "m_class",
        "lbl_direction": "m_dir",
    }
    out = (
        ops.join(take("step_rid", {"lbl_step": "step"}), on="step_rid", how="left")
        .join(take("phase_rid", {"lbl_phase": "phase"}), on="phase_rid", how="left")
        .join(take("module_rid", module_cols), on="module_rid", how="left")
        .join(
            take("seq_module_rid", {k: "s" + v for k, v in module_cols.items()}),
            on="seq_module_rid",
            how="left",
        )
        .join(
            take(
                "aten_rid",
                {"lbl_aten_op": "a_op", "lbl_direction": "a_dir", "lbl_shapes": "a_shapes"},
            ),
            on="aten_rid",
            how="left",
        )
    )
    is_cpu = pl.col("kind") == "cpu_op"
    return out.with_columns(
        pl.coalesce("m_module", "sm_module").alias("module"),
        pl.coalesce("m_class", "sm_class").alias("module_class"),
        pl.coalesce("a_dir", "m_dir").alias("direction"),
        pl.when(is_cpu).then(pl.col("name")).otherwise(pl.col("a_op")).alias("aten_op"),
        pl.coalesce("input_shapes", "a_shapes").alias("input_shapes"),
    )


def _range_paths(ranges: pl.DataFrame, range_ids: pl.Series) -> pl.DataFrame:
    """`range_id, range_name, range_path, range_depth` for the given ids.

    Walks parent links upwards once per nesting level, for the distinct ids
    only; the path runs outermost to innermost.
    """
    links = ranges.select("range_id", "parent_id", "name", "depth")
    hit = pl.DataFrame({"range_id": range_ids.drop_nulls().unique()}, schema={"range_id": pl.Int64})
    walk = hit.with_columns(pl.col("range_id").alias("cur"), pl.lit(0).alias("level"))
    steps = [walk]
    while not walk.is_empty():
        walk = (
            walk.join(links.select(pl.col("range_id").alias("cur"), "parent_id"), on="cur")
            .filter(pl.col("parent_id").is_not_null())
            .select("range_id", pl.col("parent_id").alias("cur"), pl.col("level") + 1)
        )
        steps.append(walk)
    names = links.select(pl.col("range_id").alias("cur"), "name")
    paths = (
        pl.concat(steps)
        .join(names, on="cur", how="left")
        .sort("range_id", "level", descending=[False, True])
        .group_by("range_id", maintain_order=True)
        .agg(pl.col("name").fill_null("").str.join(PATH_SEPARATOR).alias("range_path"))
    )
    own = links.select(
        "range_id", pl.col("name").alias("range_name"), pl.col("depth").alias("range_depth")
    )
    return paths.join(own, on="range_id", how="left")


def _finish(ops: pl.DataFrame) -> pl.DataFrame:
    """Attribution status, then the declared OPS columns."""
    status = (
        pl.when(pl.col("launch_start_ns").is_null())
        .then(pl.lit("no_launch"))
        .when(pl.col("range_id").is_not_null())
        .then(pl.lit("range"))
        .when(pl.col("projected"))
        .then(pl.lit("window"))
        .otherwise(pl.lit("no_range"))
    )
    out = ops.with_columns(status.alias("attribution")).sort("op_id")
    return schemas.conform(out.select(schemas.OPS.names()), schemas.OPS, "ops")
