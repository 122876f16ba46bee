"""How many forward passes a profile holds: from its steps, else from its forward ranges.

With step ranges a forward pass is one (device, step) pair with forward work
(nsysmap.report.scope_tables: `passes`). Without them, a forward pass is one
instance of a range that gives phase `forward` and lies in no other forward
range, counted from `by_range.parquet` (its `calls` are the instances of a
path with operations inside)::

    range_path                     calls        forward passes
    profile > forward pass             1   ->   1
    Step 3 > Forward                   1   ->   1 per step range instance
    warm-up > forward                  1   ->   0 (warm-up work is left out)

The range names are read with the same step and phase rules as attribution
(the user's `--phase` / `--step` rules, recorded in manifest.json, first).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from nsysmap.attribution.labels import name_labels
from nsysmap.attribution.paths import PATH_SEPARATOR
from nsysmap.attribution.rules import NameRules, user_rules
from nsysmap.report.scope_tables import has_phases, has_steps, passes, scope_filter


def manifest_rules(manifest: dict[str, Any]) -> NameRules:
    """The step and phase rules the run was attributed with (manifest.json `options`)."""
    options = manifest.get("options")
    options = options if isinstance(options, dict) else {}
    steps = [str(rule) for rule in options.get("step_rules") or []]
    phases = [str(rule) for rule in options.get("phase_rules") or []]
    return user_rules(steps, phases)


def forward_passes(
    ops: pl.DataFrame, by_range: pl.DataFrame | None, rules: NameRules
) -> tuple[int | None, str | None]:
    """(forward passes, where the count comes from: "steps", "forward ranges" or, in a
    profile without phases, "root module calls").

    (None, None) when the profile has no forward work or nothing to count it by.
    """
    forward = scope_filter(ops, "forward")
    if forward.is_empty():
        return None, None
    if has_steps(ops):
        return passes(forward), "steps"
    phase, module = forward_range_calls(by_range, rules)
    if phase:
        return phase, "forward ranges"
    return (module, "root module calls") if module and not has_phases(ops) else (None, None)


def forward_range_calls(by_range: pl.DataFrame | None, rules: NameRules) -> tuple[int, int]:
    """(instances of outermost forward-phase ranges, instances of outermost forward module
    ranges), outside warm-up, summed over devices."""
    if by_range is None or by_range.is_empty():
        return 0, 0
    paths = by_range.filter(pl.col("range_path").is_not_null()).select("range_path", "calls")
    names = paths.select(pl.col("range_path").str.split(PATH_SEPARATOR).alias("name"))
    distinct = names.explode("name").unique("name")
    columns = ["lbl_phase", "lbl_module", "lbl_direction", "lbl_warmup"]
    labels = distinct.with_columns(name_labels(distinct["name"], columns, rules))
    phase_of = dict(zip(labels["name"].to_list(), labels["lbl_phase"].to_list(), strict=True))
    forward_module = labels.filter(
        pl.col("lbl_module").is_not_null() & (pl.col("lbl_direction") == "forward")
    )
    modules = set(forward_module["name"].to_list())
    warm = set(labels.filter(pl.col("lbl_warmup").fill_null(False))["name"].to_list())
    phase_calls = module_calls = 0
    for path, calls in paths.iter_rows():
        names_in = path.split(PATH_SEPARATOR)
        phases = [phase_of.get(name) for name in names_in]
        if warm.intersection(names_in):
            continue
        if phases[-1] == "forward" and "forward" not in phases[:-1]:
            phase_calls += int(calls or 0)
        if names_in[-1] in modules and not modules.intersection(names_in[:-1]):
            module_calls += int(calls or 0)
    return phase_calls, module_calls
