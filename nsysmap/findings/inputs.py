"""What the rules read: the tables nsysmap writes, narrowed to the measured steps.

`Inputs` holds the OPS rows (a LazyFrame: held in memory or scanned from
ops.parquet), the waits tables (idle, launch_cost), the devices and the
backend. The *measured* work is what the report's step scope holds: with step
ranges, the operations in a step; else (below) those in a step of the
structure; else those in a phase; else every operation; warm-up work never.
Per device, a step's wall time runs from its first operation's start to its
last one's end; the *step time* adds the gap before the next step (where its
number follows), so that what a step waits for between steps counts in it:
over the steps, the time from the first step's start to the last one's end,
per step. Without steps the whole measured work is one step. Every figure of a
finding is a total over the measured steps, divided by their number.

Where no operation has a step label but the structure (structure.parquet,
nsysmap.structure) found steps in its measured region that ranges mark (a
range holding one forward and one backward pass), in every device and process,
those are the steps, as the report's step scope has them: each operation in
one of them takes its index as its step, and the others are not measured. The
waits tables know no such step: their gaps take the step of the operation that
ends them, and the launches are counted again from the operations, unless the
steps hold the very operations the labels alone would measure (then the
tables' rows are theirs).

A profile with neither steps nor phases is narrowed by its structure
(structure.parquet, nsysmap.structure) where that leaves work out: only the
operations of the measured region count, not the set-up, warm-up or tail
before and after it (nor what the GPU ran from before the capture).

The pools of time that findings claim (nsysmap.findings.finding) are built
here once, so that two findings over the same time name the same key with
the same capacity: busy time per (device, phase, module, category), idle
time per (device, phase, module) and kind from launch_cost.parquet. The part of
an idle pool under exposed communication is claimed at the communication's key
instead (nsysmap.findings.comm_gaps).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import polars as pl

from nsysmap.core.findings_schema import per_words, share_words
from nsysmap.core.scalars import to_int
from nsysmap.core.schemas import OPS, empty
from nsysmap.core.wait_schemas import IDLE, LAUNCH_COST
from nsysmap.findings.structure_scope import measured_region, measured_steps
from nsysmap.findings.threshold import LAUNCH_GAP

# The OPS columns the rules read.
COLUMNS = (
    "op_id",
    "kind",
    "category",
    "device_id",
    "stream_id",
    "pid",
    "start_ns",
    "end_ns",
    "dur_ns",
    "name",
    "short_name",
    "launch_api",
    "step",
    "phase",
    "warmup",
    "module",
    "module_class",
    "direction",
    "range_path",
    "compiled_graph",
    "graph_id",
)
OWNER = ["device_id", "phase", "module"]  # the keys of the idle pools
OWNER_TYPES = {"device_id": pl.Int64, "phase": pl.String, "module": pl.String}
BUSY_KEYS = [*OWNER, "category"]  # ... and of the busy pool
IDLE_KINDS = ("launch", "latency", "sync", "other_stream", "unknown")
# The columns of the idle pools (besides OWNER), all Int64.
POOL_COLUMNS: dict[str, pl.DataType] = {
    c: pl.Int64()
    for c in (
        *("ops", "busy_ns", "gaps", "idle_ns", "idle_launch_ns", "idle_long_launch_ns"),
        *(f"idle_{k}_ns" for k in IDLE_KINDS if k != "launch"),
    )
}
STEPS, PHASES, CAPTURE = "steps", "phases", "capture"


@dataclass(frozen=True)
class Inputs:
    """The tables one process's findings are made from."""

    ops: pl.LazyFrame  # the OPS rows (at least COLUMNS)
    launch_cost: pl.DataFrame
    idle: pl.DataFrame
    devices: pl.DataFrame = field(default_factory=pl.DataFrame)  # the profile's devices
    cpu: bool = False  # the torch.profiler CPU backend: CPU operators, self time
    rank: int | None = None
    # The job of several ranks (nsysmap.many): its cross-rank tables, and each rank's inputs.
    across: Mapping[str, pl.DataFrame] | None = None
    ranks: tuple[Inputs, ...] = ()
    structure: pl.DataFrame | None = None  # structure.parquet; None: not written
    # What other modules work out once per input (nsysmap.findings.comm_gaps).
    memo: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    @cached_property
    def labels(self) -> str:
        """What the operations' labels give: steps, phases, or neither (the capture)."""
        found = self.ops.select(
            steps=pl.col("step").is_not_null().any(), phases=pl.col("phase").is_not_null().any()
        ).collect()
        if found["steps"][0]:
            return STEPS
        return PHASES if found["phases"][0] else CAPTURE

    @cached_property
    def basis(self) -> str:
        """What the measured work is made of: steps (labelled, or the structure's),
        phases, or the whole capture."""
        return STEPS if self.structure_steps is not None else self.labels

    @cached_property
    def structure_steps(self) -> pl.DataFrame | None:
        """Without step labels: per operation, in their order, `op_id` and `step` (the
        index of the structure's measured step that holds it, null: none); None where
        the labels give steps, or the structure has none to give (structure_scope)."""
        if self.structure is None or self.labels == STEPS:
            return None
        return measured_steps(self.ops, self.structure)

    @property
    def per_step(self) -> bool:
        """Are the figures per measured step? Without steps the measured work counts as
        one: its figures are totals over it, its shares of its wall time."""
        return self.basis == STEPS

    @property
    def step_rows(self) -> str:
        """The table and columns that hold each measured step's span, in words."""
        if self.structure_steps is not None:
            return "structure.parquet (kind step: gpu_start_ns, gpu_end_ns)"
        return "by_step.parquet (first_start_ns, last_end_ns)"

    @property
    def per(self) -> str:
        """What follows a time or count in a finding's words: " per step" or nothing."""
        return per_words(self.per_step)

    @property
    def the_step(self) -> str:
        """What a share in a finding's words is of: "the step" or "the measured wall time"."""
        return share_words(self.per_step)

    @cached_property
    def region(self) -> pl.DataFrame | None:
        """Without steps or phases: the `op_id` of each operation in the structure's
        measured region, where the structure leaves other work out (set-up, warm-up,
        tail, what the GPU ran from before the capture); else None: every operation is
        measured. A device of a process the structure has no region for is kept whole."""
        if self.structure is None or self.basis != CAPTURE:
            return None
        return measured_region(self.ops, self.structure)

    def measured(self) -> pl.LazyFrame:
        """The measured operations (see the module's docstring)."""
        warm = pl.col("warmup").fill_null(False)
        inside = {STEPS: pl.col("step").is_not_null(), PHASES: pl.col("phase").is_not_null()}
        ops = self._stepped().filter(inside.get(self.basis, pl.lit(True)) & ~warm)
        if self.region is not None:
            ops = ops.join(self.region.lazy(), on="op_id", how="semi")
        return ops

    def _stepped(self) -> pl.LazyFrame:
        """The OPS rows (COLUMNS), each with the structure's step where it gives them
        (set beside the rows, which are in the same order: no join)."""
        ops = self.ops.select(COLUMNS)
        if self.structure_steps is None:
            return ops
        steps = self.structure_steps.lazy().select("step")
        return pl.concat([ops.drop("step"), steps], how="horizontal").select(COLUMNS)

    def measured_waits(self, table: pl.DataFrame) -> pl.DataFrame | None:
        """Rows of a waits table in the measured steps (the waits have no warm-up mark);
        None where the measured region or the structure's steps cut through them (its
        rows know neither)."""
        basis = self.basis
        if self.structure_steps is not None:
            if not self.labels_agree:
                return None
            basis = self.labels
        if basis == STEPS:
            return table.filter(pl.col("step").is_not_null())
        if basis == PHASES:
            return table.filter(pl.col("phase").is_not_null())
        return None if self.region is not None else table

    @cached_property
    def labels_agree(self) -> bool:
        """With the structure's steps: do they hold the very operations the labels alone
        would measure (those in a phase, else every one; warm-up work never)? Then the
        waits tables' rows, kept by the labels, are those of the measured work."""
        labelled = pl.col("phase").is_not_null() if self.labels == PHASES else pl.lit(True)
        same = (labelled == pl.col("step").is_not_null()) | pl.col("warmup").fill_null(False)
        return bool(self._stepped().select(same.all()).collect().item())

    @cached_property
    def windows(self) -> pl.DataFrame:
        """Per device and step: first start, last end, wall time, the phase of its first
        operation, and the gap after the step before the next (null after the last step
        and before a step number that does not follow)."""
        key = ["device_id", "step"] if self.basis == STEPS else ["device_id"]
        windows = (
            self.measured()
            .sort("start_ns")
            .group_by(key)
            .agg(
                start_ns=pl.col("start_ns").min(),
                end_ns=pl.col("end_ns").max(),
                first_phase=pl.col("phase").first(),
            )
            .collect()
            .sort(key)
        )
        windows = windows.with_columns(wall_ns=pl.col("end_ns") - pl.col("start_ns"))
        if self.basis != STEPS:
            return windows.with_columns(
                gap_ns=pl.lit(None, pl.Int64), next_phase=pl.lit(None, pl.String)
            )

        def following(column: str) -> pl.Expr:
            return pl.col(column).shift(-1).over("device_id")

        after = following("step") == pl.col("step") + 1
        return windows.with_columns(
            gap_ns=pl.when(after).then((following("start_ns") - pl.col("end_ns")).clip(0)),
            next_phase=pl.when(after).then(following("first_phase")),
        )

    @cached_property
    def steps(self) -> dict[int, tuple[int, int]]:
        """device -> (measured steps, mean step time in ns): the steps' wall times and the
        gaps between consecutive steps, over the number of steps."""
        per = self.windows.group_by("device_id").agg(
            n=pl.len(), time=pl.col("wall_ns").sum() + pl.col("gap_ns").fill_null(0).sum()
        )
        return {
            row["device_id"]: (row["n"], round(row["time"] / row["n"]))
            for row in per.iter_rows(named=True)
        }

    def step_count(self, device: int | None) -> int:
        return self.steps.get(device, (1, 0))[0] if device is not None else 1

    def step_ns(self, device: int | None) -> int:
        return self.steps.get(device, (1, 0))[1] if device is not None else 0

    @cached_property
    def busy(self) -> pl.DataFrame:
        """The busy pool: per BUSY_KEYS, operations and their summed time."""
        grouped = (
            self.measured().group_by(BUSY_KEYS).agg(ops=pl.len(), busy_ns=pl.col("dur_ns").sum())
        )
        return grouped.collect()

    def has(self, category: str, *, in_module: bool = False) -> bool:
        """Does any measured operation (of a module, with `in_module`) have this category?
        From the busy pool: a rule with nothing to look at reads no operation again."""
        rows = self.busy.filter(pl.col("category") == category)
        if in_module:
            rows = rows.filter(pl.col("module").is_not_null())
        return rows.height > 0

    def with_busy(self, frame: pl.DataFrame) -> pl.DataFrame:
        """`frame` (keyed by BUSY_KEYS) with the busy pool's `busy_ns` there."""
        return frame.join(self.busy, on=BUSY_KEYS, how="left", nulls_equal=True)

    @cached_property
    def busiest(self) -> pl.DataFrame:
        """Per device, the stream that runs most of its work: most time of operations
        other than communication (a device with nothing else: of communication); ties:
        the lowest stream id."""
        comm = pl.col("category") == "communication"
        per = (
            self.measured()
            .group_by("device_id", "stream_id")
            .agg(work=pl.col("dur_ns").filter(~comm).sum(), busy=pl.col("dur_ns").sum())
        )
        order = ["device_id", "work", "busy", "stream_id"]
        ranked = per.sort(order, descending=[False, True, True, False])
        first = ranked.group_by("device_id", maintain_order=True).first()
        return first.select("device_id", "stream_id").collect()

    @cached_property
    def gaps(self) -> pl.DataFrame:
        """The idle gaps (idle.parquet) of each device's busiest stream that end at a
        measured operation and begin inside the measured work (its step's window; without
        steps, after the first measured operation): the GPU waiting on the stream that
        does most of the work."""
        if self.idle.is_empty():
            return self.idle
        ends = self.measured().select(next_op_id="op_id")
        key = ["device_id", "step"] if self.basis == STEPS else ["device_id"]
        starts = self.windows.select(*key, window_ns="start_ns").lazy()
        idle = self.idle.lazy()
        if self.structure_steps is not None:  # the step of the operation that ends the gap
            steps = self.structure_steps.drop_nulls("step").rename({"op_id": "next_op_id"})
            idle = idle.drop("step").join(steps.lazy(), on="next_op_id", how="left")
        found = (
            idle.join(self.busiest.lazy(), on=["device_id", "stream_id"], how="semi")
            .join(ends, on="next_op_id", how="semi")
            .join(starts, on=key, how="inner")
            .filter(pl.col("start_ns") >= pl.col("window_ns"))
            .drop("window_ns")
        )
        return found.collect()

    @cached_property
    def idle_pools(self) -> pl.DataFrame:
        """The idle pools: per OWNER, the busiest stream's gaps by kind (launch gaps up to
        LAUNCH_GAP apart from longer ones), and its operations' busy time."""
        if self.gaps.is_empty():
            return pl.DataFrame(schema={**OWNER_TYPES, **POOL_COLUMNS})
        kind, dur = pl.col("kind").cast(pl.String), pl.col("dur_ns")
        short = dur <= LAUNCH_GAP.value
        gaps = self.gaps.group_by(OWNER).agg(
            gaps=pl.len(),
            idle_ns=dur.sum(),
            idle_launch_ns=dur.filter((kind == "launch") & short).sum(),
            idle_long_launch_ns=dur.filter((kind == "launch") & ~short).sum(),
            **{f"idle_{k}_ns": dur.filter(kind == k).sum() for k in IDLE_KINDS if k != "launch"},
        )
        busy = (
            self.measured()
            .join(self.busiest.lazy(), on=["device_id", "stream_id"], how="semi")
            .group_by(OWNER)
            .agg(ops=pl.len(), busy_ns=pl.col("dur_ns").sum())
            .collect()
        )
        pools = busy.join(gaps, on=OWNER, how="full", coalesce=True, nulls_equal=True)
        filled = pools.with_columns(pl.col(list(POOL_COLUMNS)).fill_null(0))
        return filled.cast(pl.Schema(POOL_COLUMNS))

    @cached_property
    def launch_costs(self) -> pl.DataFrame:
        """launch_cost.parquet summed over the measured steps per OWNER (launches, ...).
        Narrowed to the structure's measured region: its operations' launches counted
        again, `shorter_than_launch` null (launch_cost.parquet's rows know no region)."""
        table = self.measured_waits(self.launch_cost)
        if table is None:
            counted = (
                self.measured()
                .group_by(OWNER)
                .agg(
                    launches=pl.col("launch_api").is_not_null().sum().cast(pl.Int64),
                    shorter_than_launch=pl.lit(None, pl.Int64),
                )
            )
            return counted.collect()
        numbers = [c for c in table.columns if c not in ("step", *OWNER, "launch_bound_share")]
        return table.group_by(OWNER).agg(pl.col(numbers).sum())

    def device_name(self, device: int | None) -> str | None:
        """The name the profile gives the device, or None."""
        return self._device(device).get("name") or None

    def compute_capability(self, device: int | None) -> float | None:
        """The device's compute capability (8.0: Ampere), or None when not given."""
        value = self._device(device).get("compute_capability")
        try:
            return float(value) if value not in (None, "") else None
        except (TypeError, ValueError):
            return None

    def _device(self, device: int | None) -> Mapping[str, Any]:
        if self.devices.is_empty() or "device_id" not in self.devices.columns:
            return {}
        rows = self.devices.filter(pl.col("device_id") == device)
        return rows.row(0, named=True) if rows.height else {}

    def where(self, device: int | None) -> str:
        """How a place names its device: "GPU 0", "CPU", "rank 1 GPU 0"."""
        name = "CPU" if self.cpu or device is None or device < 0 else f"GPU {device}"
        return name if self.rank is None else f"rank {self.rank} {name}"


def total_ns(frame: pl.DataFrame, column: str) -> int:
    """The sum of a column (0 for an empty frame)."""
    return to_int(frame[column].sum()) if frame.height else 0


def job_inputs(across: Mapping[str, pl.DataFrame], ranks: tuple[Inputs, ...]) -> Inputs:
    """The inputs of a job of several ranks: its cross-rank tables, no operations."""
    ops = pl.LazyFrame(schema={c: OPS[c] for c in COLUMNS})
    return Inputs(ops, empty(LAUNCH_COST), empty(IDLE), across=across, ranks=ranks)
