"""torch.compile'd graphs: each compiled kernel to the module it came from.

Inside a compiled region no module hook fires, so the kernels first land in
the region's own module range (the model, for `torch.compile(model)`). The
capture's compiled.json (`profile.compiled`) lists, per compiled graph, its
kernel calls in order with the modules their FX nodes came from. In the
trace, every call of a graph is a range `## Call CompiledFxGraph <key> ##`
on the calling thread, and every kernel call inside it a CPU-side event
named like the kernel (`graph_0_cpp_fused_gelu_1` on CPU, the Triton launch
`triton_poi_fused_gelu_1` or the operator `aten::mm` on CUDA):

    thread [## Call CompiledFxGraph k ## [cpp_fused_gelu_1] [aten::addmm] [cpp_fused_gelu_1]]
    units                                occurrence 0     occurrence 0    occurrence 1
    sites of k                           0 blocks.0.act   1 blocks.0.fc2  2 blocks.1.act

The n-th outermost event of a kernel name inside one call is that name's
n-th call site. Operations launched inside a unit (the CPU kernel itself,
its child operators, the GPU kernels of a Triton launch or of `aten::mm`)
get its module: the region's module path + the kernel's nearest common
module; `fused_modules` lists every module the kernel covers; `direction`
is the graph's (forward or backward) for everything inside the call. With
CUDA graphs (no CPU event per kernel), the GPU kernels launched inside a
call are matched in the order they ran (`nsysmap.attribution.compiled_replay`).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from instrument.compiled_doc import CALL_PREFIX, CALL_RANGE, RUNTIME_PREFIX
from nsysmap.attribution.compiled_replay import UNIT, replayed
from nsysmap.core import schemas
from nsysmap.core.profile import Profile

ADDED = {"compiled_graph": pl.String, "fused_modules": pl.String}
_KEYS = ["pid", "tid"]
_SEQ_SUFFIX = r", (?:stashed )?seq = .*$"  # the trace reader's autograd-link suffix


@dataclass(frozen=True)
class CompiledContext:
    """Graph calls and kernel units of a profile, found once for all chunks of ops."""

    calls: pl.DataFrame  # pid, tid, start_ns, end_ns, call, graph, graph_direction
    units: pl.DataFrame  # pid, tid, start_ns, end_ns, unit columns (CPU-side kernel calls)
    replays: pl.DataFrame  # graph, graph_direction, kernel, occurrence, unit columns


def compiled_context(profile: Profile) -> CompiledContext | None:
    """Calls and units of `profile`; None when it has no compiled-graph call.

    Only torch.profiler traces (or profiles with a compiled.json) hold graph
    calls, so an nsys export with millions of ranges is not searched.
    """
    trace = profile.meta_value("backend") == "torch.profiler"
    if profile.compiled.is_empty() and not trace:
        return None
    calls = (
        cpu_events(profile, pl.col("name").str.starts_with(CALL_PREFIX))
        .with_columns(graph=pl.col("name").str.extract(CALL_RANGE, 1))
        .filter(pl.col("graph").is_not_null())
        .sort("start_ns")
        .with_row_index("call")
    )
    if calls.is_empty():
        return None
    directions = profile.compiled.select("graph", "graph_direction").unique("graph")
    calls = calls.join(directions, on="graph", how="left").select(
        *_KEYS, "start_ns", "end_ns", "call", "graph", "graph_direction"
    )
    kernel = runtime_kernel_name(pl.col("name"))
    names = profile.compiled["kernel"].unique().implode()
    events = cpu_events(profile, kernel.is_in(names)).with_columns(kernel=kernel)
    units = _sited(_kernel_events(events, calls, profile.compiled), profile.compiled)
    return CompiledContext(calls, units, profile.compiled)


def runtime_kernel_name(name: pl.Expr) -> pl.Expr:
    """A CPU event's name as compiled.json names kernels (`graph_0_` and seq suffix off)."""
    return name.str.replace(_SEQ_SUFFIX, "").str.replace(RUNTIME_PREFIX, "")


def cpu_events(profile: Profile, keep: pl.Expr) -> pl.DataFrame:
    """Named CPU-side intervals whose name satisfies `keep`: ranges, and the
    operators of a CPU-only trace (an event in both is kept once)."""
    ranges = profile.ranges.filter(keep).select(*_KEYS, "name", "start_ns", "end_ns")
    cpu = profile.ops.filter(pl.col("kind") == "cpu_op", keep).select(
        "pid", pl.col("stream_id").alias("tid"), "name", "start_ns", "end_ns"
    )
    return pl.concat([ranges, cpu]).unique(maintain_order=True)


def _within_calls(frame: pl.DataFrame, calls: pl.DataFrame, at: str) -> pl.DataFrame:
    """`frame` rows whose `at` time lies inside a graph call on their thread, with the call."""
    right = calls.select(*_KEYS, "call", "graph", "graph_direction", "start_ns", "end_ns").rename(
        {"start_ns": "call_start_ns", "end_ns": "call_end_ns"}
    )
    joined = frame.sort(at).join_asof(
        right.sort("call_start_ns"),
        left_on=at,
        right_on="call_start_ns",
        by=_KEYS,
        check_sortedness=False,
    )
    return joined.filter(pl.col(at) < pl.col("call_end_ns"))


def _kernel_events(
    events: pl.DataFrame, calls: pl.DataFrame, compiled: pl.DataFrame
) -> pl.DataFrame:
    """The outermost events inside each call named like one of its graph's kernels."""
    inside = _within_calls(events, calls, "start_ns").filter(
        pl.col("end_ns") <= pl.col("call_end_ns")
    )
    known = compiled.select("graph", "kernel").unique()
    kernels = inside.join(known, on=["graph", "kernel"], how="semi")
    ordered = kernels.sort("call", "start_ns", pl.col("end_ns"), descending=[False, False, True])
    outer = ordered.filter(
        pl.col("start_ns") >= pl.col("end_ns").cum_max().shift(1).over("call").fill_null(0)
    )
    return outer.with_columns(occurrence=pl.int_range(pl.len()).over("call", "kernel"))


def _sited(kernels: pl.DataFrame, compiled: pl.DataFrame) -> pl.DataFrame:
    """Kernel events with the module of their call site."""
    sites = compiled.select("graph", "kernel", "occurrence", *UNIT)
    return kernels.join(sites, on=["graph", "kernel", "occurrence"], how="inner").select(
        *_KEYS, "start_ns", "end_ns", "call", *UNIT
    )


def apply_compiled(ops: pl.DataFrame, ctx: CompiledContext | None) -> pl.DataFrame:
    """`ops` (attributed) with compiled kernels given their modules; adds the ADDED columns."""
    if ctx is None or ops.is_empty():
        return ops.with_columns(pl.lit(None, dtype).alias(name) for name, dtype in ADDED.items())
    keyed = ops.with_row_index("_row").with_columns(
        pl.coalesce("launch_start_ns", "start_ns").alias("_at")
    )
    anchored = keyed.filter(pl.col("tid").is_not_null() & pl.col("_at").is_not_null())
    in_call = _within_calls(anchored.select("_row", *_KEYS, "_at"), ctx.calls, "_at")
    found = _unit_of(in_call, ctx.units)
    replays = replayed(keyed, found, ctx.replays)
    if replays.height:
        found = found.update(replays, on="_row", how="left")
    out = keyed.join(found, on="_row", how="left", maintain_order="left")
    return _labelled(out).drop("_row", "_at")


def _unit_of(in_call: pl.DataFrame, units: pl.DataFrame) -> pl.DataFrame:
    """For each op inside a call: the CPU-side kernel call its launch lies in (or none)."""
    right = units.rename({"start_ns": "unit_start_ns", "end_ns": "unit_end_ns"}).drop("call")
    joined = in_call.sort("_at").join_asof(
        right.sort("unit_start_ns"),
        left_on="_at",
        right_on="unit_start_ns",
        by=_KEYS,
        check_sortedness=False,
    )
    inside = (pl.col("_at") < pl.col("unit_end_ns")) | (pl.col("_at") == pl.col("unit_start_ns"))
    return joined.with_columns(
        pl.when(inside).then(pl.col(c)).otherwise(None).alias(c) for c in UNIT
    ).select("_row", "call", "graph", "graph_direction", *UNIT)


def _labelled(out: pl.DataFrame) -> pl.DataFrame:
    """Module, class, direction, graph and fused modules from the matched unit.

    Paths from compiled.json are relative to the compiled region, whose own
    module is the one ordinary attribution gave the op ("" the root).
    """
    region = pl.col("module").fill_null("")
    matched = pl.col("rel_modules").is_not_null()
    has_module = matched & pl.col("rel_module").is_not_null()
    direction = pl.coalesce(pl.col("graph_direction").cast(pl.String), pl.col("direction"))
    out = out.with_columns(
        _fused(out).alias("fused_modules"),
        module=pl.when(has_module).then(_under(region, pl.col("rel_module"))).otherwise("module"),
        module_class=pl.when(has_module & (pl.col("rel_module") != ""))
        .then(pl.col("rel_class"))
        .otherwise("module_class"),
        direction=direction.cast(schemas.Direction),
        compiled_graph=pl.col("graph"),
    )
    return out.drop(*UNIT, "call", "graph", "graph_direction")


def _under(region: pl.Expr, rel: pl.Expr) -> pl.Expr:
    """`rel` placed under `region` (either may be "" for the root)."""
    return (
        pl.when(region == "")
        .then(rel)
        .when(rel == "")
        .then(region)
        .otherwise(pl.concat_str(region, pl.lit("."), rel))
    )


def _fused(out: pl.DataFrame) -> pl.Series:
    """Every module a matched kernel covers, under its region, joined by ", ".

    "" for a kernel none of whose nodes came from a module; null for any other op.
    """
    rows = out.select("_row", region=pl.col("module").fill_null(""), rel=pl.col("rel_modules"))
    flat = rows.filter(pl.col("rel").is_not_null()).explode("rel")
    joined = (
        flat.with_columns(path=_under(pl.col("region"), pl.col("rel").fill_null("")))
        .group_by("_row", maintain_order=True)
        .agg(pl.col("path").filter(pl.col("rel").is_not_null()).str.join(", "))
    )
    paths = rows.join(joined, on="_row", how="left", maintain_order="left")
    return paths.select(pl.when(pl.col("rel").is_not_null()).then(pl.col("path").fill_null("")))[
        "path"
    ]
