"""What PyTorch records anyway says about each operation: backward, forward, optimizer.

A profile without phase ranges usually still tells backward work apart, and
where the optimizer runs (`nsysmap.attribution.recorded_steps` turns this into steps
and phases):

* **backward**: launched from autograd's engine thread (`pt_autograd_N`, the
  name PyTorch gives the threads that run backward for a CUDA device), inside
  a range of an autograd node (`autograd::engine::evaluate_function:
  MmBackward0`, `MmBackward0`, a `stashed seq`: labels.AUTOGRAD_NODE), or with
  direction backward from its module range or its autograd sequence number
  (the ops' `direction`);
* **forward**: inside a forward module call (a module range of direction
  forward, e.g. the torch.profiler reader's `nn.Module` frames) and no backward;
* **optimizer**: a kernel of the `optimizer` category (`multi_tensor_apply`,
  `_foreach_`, fused Adam: nsysmap.attribution.categories), not backward.

`evidence` gives one row per operation, in operation order, with the range-given
step and phase beside it, its launch time and its place in its stream (for work
without a launch call): all vectorised, from the positions `locate` found.
"""

from __future__ import annotations

import polars as pl

from nsysmap.attribution.scope import AUTOGRAD, Scope
from nsysmap.core.schemas import declare

# Thread names of autograd's per-device worker threads (nsys ThreadNames,
# torch.profiler `thread_name` metadata: `thread 1262 (pt_autograd_0)`).
AUTOGRAD_THREAD = r"\bpt_autograd_\d+\b"
OPTIMIZER_CATEGORY = "optimizer"
EVIDENCE = declare(
    {
        "pid": pl.Int64,
        "t": pl.Int64,  # launch time (the op's own start without a launch)
        "launched": pl.Boolean,  # has a launch call, or none in its process has one
        "device_id": pl.Int64,
        "stream_id": pl.Int64,
        "start_ns": pl.Int64,  # on the device: the op's place in its stream
        "range_step": pl.Int64,
        "range_phase": pl.String,
        "backward": pl.Boolean,
        "forward": pl.Boolean,
        "optimizer": pl.Boolean,
        "name": pl.String,  # the kernel's (nsysmap.attribution.record_repeat)
    }
)


def evidence(
    ops: pl.DataFrame,
    found: pl.DataFrame,
    scope: Scope | None,
    threads: pl.DataFrame,
    category: pl.Series,
) -> pl.DataFrame:
    """EVIDENCE per op of `ops` (pid, tid, launch_start_ns, start_ns), in order.

    `found` holds `locate`'s positions for the same ops, `category` their
    kernel categories; `scope` is None for a profile without ranges.
    """
    labels = _range_labels(found, scope, ops.height)
    autograd_thread = _on_autograd_thread(ops, threads)
    backward = autograd_thread | labels["in_node"] | (labels["direction"] == "backward")
    backward = backward.fill_null(False)
    forward = (labels["direction"] == "forward").fill_null(False) & ~backward
    optimizer = (category == OPTIMIZER_CATEGORY).fill_null(False) & ~backward
    frame = pl.DataFrame(
        {
            "pid": ops["pid"],
            "t": ops.select(pl.coalesce("launch_start_ns", "start_ns")).to_series(),
            "launched": _launched(ops),
            "device_id": ops["device_id"],
            "stream_id": ops["stream_id"],
            "start_ns": ops["start_ns"],
            "range_step": labels["step"],
            "range_phase": labels["phase"],
            "backward": backward,
            "forward": forward,
            "optimizer": optimizer,
            "name": ops["name"],
        }
    )
    return frame.cast(EVIDENCE)


def _launched(ops: pl.DataFrame) -> pl.Series:
    """True for ops with a launch call, and for every op of a process without any."""
    launched = pl.col("launch_start_ns").is_not_null()
    return ops.select(launched | ~launched.any().over("pid")).to_series()


def _range_labels(found: pl.DataFrame, scope: Scope | None, n_ops: int) -> dict[str, pl.Series]:
    """Step, phase and module direction from the ranges, and whether inside an autograd node."""
    if scope is None:
        return {
            "step": pl.repeat(None, n_ops, dtype=pl.Int64, eager=True),
            "phase": pl.repeat(None, n_ops, dtype=pl.String, eager=True),
            "direction": pl.repeat(None, n_ops, dtype=pl.String, eager=True),
            "in_node": pl.repeat(False, n_ops, eager=True),
        }
    module = scope.labels(found["module"], ["lbl_direction"])["lbl_direction"]
    via_seq = pl.select(pl.when(found["seq_module"].is_not_null()).then(pl.lit("backward")))
    return {
        "step": scope.label(found["step"], "lbl_step"),
        "phase": scope.label(found["phase"], "lbl_phase"),
        "direction": pl.select(pl.coalesce(module, via_seq.to_series())).to_series(),
        "in_node": found[AUTOGRAD].is_not_null(),
    }


def _on_autograd_thread(ops: pl.DataFrame, threads: pl.DataFrame) -> pl.Series:
    """True for ops launched from a thread named like autograd's workers."""
    workers = threads.filter(pl.col("thread_name").str.contains(AUTOGRAD_THREAD).fill_null(False))
    if workers.is_empty():
        return pl.repeat(False, ops.height, eager=True)
    keys = workers.select("pid", "tid").unique().with_columns(worker=pl.lit(True))
    joined = ops.select("pid", "tid").join(
        keys, on=["pid", "tid"], how="left", maintain_order="left"
    )
    return joined["worker"].fill_null(False)
