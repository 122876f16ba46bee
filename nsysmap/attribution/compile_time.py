"""How much of a torch.profiler capture went to torch.compile compiling.

Dynamo, AOTAutograd and Inductor time their phases with `dynamo_timed`,
which torch.profiler records as CPU events named `<phase> (dynamo_timed)`
(`_compile.compile_inner (dynamo_timed)`, `compile_fx_inner (dynamo_timed)`,
`backward._backward_impl (dynamo_timed)` for a backward compiled lazily, ...).
The outermost of them on each thread are compilations:

    thread  [_compile.compile_inner (dynamo_timed) [bytecode_tracing ...] [compile_fx ...]]
            |<-------------------- one compilation: wall time ------------------->|
    ops        ^ aten ops run while compiling (fake tensors, autotuning) count as inside

`compile_facts` gives the number of compilations, their wall time, and the
time of the profile's operations launched inside them, as profile metadata
(shown in the summary, kept in manifest.json). Run-time events
(`TorchDynamo Cache Lookup`, `Torch-Compiled Region`) are not compilation.
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from nsysmap.attribution.compiled_modules import cpu_events
from nsysmap.core.launch_keys import first_calls
from nsysmap.core.profile import NestedProfile, Profile, meta_frame

COMPILE_EVENT = " (dynamo_timed)"  # the name's end
FACTS = ("compile_events", "compile_wall_ns", "compile_op_ns", "compiled_graphs")


def compile_spans(profile: Profile) -> pl.DataFrame:
    """The outermost compile events per thread: pid, tid, start_ns, end_ns."""
    events = cpu_events(profile, pl.col("name").str.ends_with(COMPILE_EVENT))
    latest_end_first = [False, False, False, True]
    ordered = events.sort(["pid", "tid", "start_ns", "end_ns"], descending=latest_end_first)
    reach = pl.col("end_ns").cum_max().shift(1).over("pid", "tid")
    outer = ordered.filter(reach.is_null() | (pl.col("start_ns") >= reach))
    return outer.select("pid", "tid", "start_ns", "end_ns")


def compile_facts(profile: Profile) -> dict[str, str]:
    """FACTS as metadata strings; {} when the capture neither compiled nor ran compiled code."""
    spans = compile_spans(profile)
    graphs = profile.compiled["graph"].n_unique()
    if spans.is_empty() and not graphs:
        return {}
    calls = profile.api_calls
    launches = calls.filter(first_calls(calls)).select(
        "pid", "correlation_id", "tid", pl.col("start_ns").alias("at")
    )
    ops = profile.ops.select("pid", "correlation_id", "dur_ns").join(
        launches, on=["pid", "correlation_id"]
    )
    inside = (
        ops.sort("at")
        .join_asof(
            spans.sort("start_ns"),
            left_on="at",
            right_on="start_ns",
            by=["pid", "tid"],
            check_sortedness=False,
        )
        .filter(pl.col("at") < pl.col("end_ns"))
    )
    return {
        "compile_events": str(spans.height),
        "compile_wall_ns": str(int((spans["end_ns"] - spans["start_ns"]).sum() or 0)),
        "compile_op_ns": str(int(inside["dur_ns"].sum() or 0)),
        "compiled_graphs": str(graphs),
    }


def with_compile_facts(profile: NestedProfile) -> NestedProfile:
    """The profile with `compile_facts` added to its metadata (pure)."""
    facts = compile_facts(profile)
    if not facts:
        return profile
    kept = profile.meta.filter(~pl.col("key").is_in(list(FACTS)))
    return replace(profile, meta=pl.concat([kept, meta_frame(facts)]))
