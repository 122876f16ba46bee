"""Module ranges from the module frames of stack-recorded torch.profiler traces.

With `with_stack=True` (PyTorch's Python tracer; `with_modules=True` alone
records them only for TorchScript), every call of an `nn.Module` is a
`python_function` event named after the module's class and PyTorch's
per-class instance number; releases before the number was added wrote the
class alone:

    nn.Module: BertLayer_3          (torch >= 1.13)
    nn.Module: BertLayer            (older)

Frames on one thread nest in time like the calls did. Each frame becomes one
range, kind `synthetic`, named

    nn.Module: BertLMHeadModel_0.BertModel_0.BertEncoder_0.BertLayer_3 (BertLayer)

that is: the frame names of the enclosing module calls on that thread,
outermost first, joined by "." (the module path), then the class (the frame
name less its `_N` instance number). `nsysmap.attribution.labels`
(`TRACE_MODULE`) reads the path and class back from this form, direction
forward, so operators and their kernels get the innermost module exactly as
under nsysmap's own module ranges. The instance number counts instances of a
class in the order PyTorch first saw them: `BertLayer_3` is the fourth
BertLayer, the attribute path (`encoder.layer.3`) is not in the trace.
"""

from __future__ import annotations

import polars as pl

from nsysmap.intervals.nesting import nest_repaired
from nsysmap.read.torch.torch_events import MODULE_PREFIX

TRACE_MODULE_FORMAT = MODULE_PREFIX + "{} ({})"  # path, class


def module_ranges(events: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Range rows (name, pid, tid, start_ns, end_ns) for module frames (`event_frame`'s
    table of them), and how many crossed.

    A frame that outlives its enclosing frame (a truncated capture) is
    clipped to the enclosing frame's end, as ranges are.
    """
    frames = events.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("fid"),
        "pid",
        "tid",
        "start_ns",
        "end_ns",
        _part(pl.col("name")).alias("part"),
    )
    if frames.is_empty():
        return _named(frames.with_columns(path=pl.col("part"))), 0
    nested, n_clipped = nest_repaired(frames, by=("pid", "tid"), id_col="fid")
    return _named(nested.join(_paths(nested), on="fid")), n_clipped


def _part(name: pl.Expr) -> pl.Expr:
    """The frame's own name (`BertLayer_3`); characters that would break a path become `_`."""
    part = name.str.strip_prefix(MODULE_PREFIX).str.strip_chars().str.replace_all(r"[^\w]", "_")
    return pl.when(part.str.len_chars() > 0).then(part).otherwise(pl.lit("_"))


def _paths(nested: pl.DataFrame) -> pl.DataFrame:
    """fid -> path: the parts from the outermost enclosing frame down, joined by ".".

    Built one nesting level at a time (module trees are a few levels deep).
    """
    levels = nested.select("fid", "parent_id", "depth", "part").partition_by(
        "depth", as_dict=True, maintain_order=False
    )
    done = pl.DataFrame(schema={"fid": pl.Int64, "path": pl.String})
    for depth in sorted(key[0] for key in levels):
        level = levels[(depth,)]
        linked = level.join(
            done.rename({"fid": "parent_id", "path": "above"}), on="parent_id", how="left"
        )
        path = pl.concat_str([pl.col("above"), pl.col("part")], separator=".", ignore_nulls=True)
        done = pl.concat([done, linked.select("fid", path.alias("path"))])
    return done


def _named(frames: pl.DataFrame) -> pl.DataFrame:
    module_class = pl.col("part").str.replace(r"_\d+$", "")
    name = pl.format(TRACE_MODULE_FORMAT, pl.col("path"), module_class)
    return frames.select(name.alias("name"), "pid", "tid", "start_ns", "end_ns")
