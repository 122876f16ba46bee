"""GPT-2-like training exports of any size: step templates tiled over many steps.

`gpt_tables(n_kernels, seed=...)` returns the tables of an export in the
current nsys schema, ready for `write_export`: two processes, each driving
its own GPU, with forward ranges on the main thread, backward ranges on an
autograd thread, NCCL all-reduces, memcpys, memsets and optimizer kernels
(`devtools.synth.gpt` builds one step). It has about `n_kernels` kernels
(whole steps) and about three ranges per kernel.

The big tables are iterators of chunks of steps, generated while they are
written, so memory stays flat whatever the size. Rows of every table are in
start order, as in real exports. A few template variants with different
costs (drawn from `seed`) alternate from step to step; the same arguments
always give the same export.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import polars as pl

from devtools.synth import gpt
from devtools.synth.bulk import Frame, global_pid, global_tid

VARIANTS = 4
STEPS_PER_CHUNK = 100
FIRST_PID = 4100
AUTOGRAD_TID_OFFSET = 17  # the autograd thread's id, relative to the process id
# Thread slot k of a template (0: main, 1: autograd, 2...: others) has thread id
# pid + thread_offset(k).
PROCESS_SKEW_NS = 1_370  # process p runs p * this behind process 0
FIRST_STEP_NS = 1_000_000
NSYS_VERSION = "2026.2.1.210"
TWIN_CLASS = 67  # backtrace twins of API rows (see docs/reading.md)
THREAD_NAMES = ("python", "pt_autograd_0")  # by thread slot
_DEVICE = "NVIDIA H100 80GB HBM3"


class Plan:
    """The templates, string ids and step offsets of one export."""

    def __init__(
        self,
        n_kernels: int,
        *,
        seed: int,
        n_layer: int,
        processes: int,
        template: Callable[[int, random.Random], gpt.Template] = gpt.step_template,
        thread_names: tuple[str, ...] = THREAD_NAMES,
    ) -> None:
        rnd = random.Random(seed)
        seeds = [rnd.random() for _ in range(VARIANTS)]
        self.templates = [template(n_layer, random.Random(s)) for s in seeds]
        first = self.templates[0]
        self.processes = processes
        self.kernels_per_step = sum(g["kind"] == "kernel" for g in first.gpu) * processes
        self.steps = max(1, round(n_kernels / self.kernels_per_step))
        choice = [rnd.randrange(VARIANTS) for _ in range(self.steps)]
        offsets, t = [], FIRST_STEP_NS
        for v in choice:
            offsets.append(t)
            t += self.templates[v].period_ns
        self.step_frame = pl.DataFrame(
            {"step": range(self.steps), "variant": choice, "offset": offsets},
            schema={"step": pl.Int64, "variant": pl.Int64, "offset": pl.Int64},
        )
        self.n_seq, self.n_op_ids, self.n_calls = first.n_seq, first.n_op_ids, len(first.calls)
        values = [name for key in gpt.KERNELS for name in gpt.KERNELS[key][:2]]
        apis = list(dict.fromkeys([*gpt.APIS, *(call["api"] for call in first.calls)]))
        values += [*apis, *(api.split("_v")[0] for api in apis), *thread_names]
        values += [r["text"] for r in first.ranges if r.get("registered")]
        self.strings = {value: i for i, value in enumerate(dict.fromkeys(values))}
        self.step_text_id = len(self.strings)  # "nsysmap:step:N" has id step_text_id + N

    def string_ids(self, column: str) -> pl.Expr:
        """The StringIds id of each value of `column` (all are known strings)."""
        return pl.col(column).replace_strict(
            list(self.strings), list(self.strings.values()), default=None, return_dtype=pl.Int64
        )

    def tiled(self, rows: str) -> Iterator[pl.DataFrame]:
        """A template table ("ranges", "calls", "gpu") repeated per step and process.

        Adds `step`, `pid`, `device`, `t0` (the step's start in that process)
        and `local` (the row's index in the template).
        """
        variants = [
            pl.DataFrame(getattr(t, rows), infer_schema_length=None)
            .with_row_index("local")
            .with_columns(variant=pl.lit(v, pl.Int64))
            for v, t in enumerate(self.templates)
        ]
        template = pl.concat(variants, how="diagonal_relaxed")
        template = template.with_columns(pl.col("local").cast(pl.Int64))
        procs = pl.DataFrame({"device": range(self.processes)}, schema={"device": pl.Int64})
        for first in range(0, self.steps, STEPS_PER_CHUNK):
            steps = self.step_frame.slice(first, STEPS_PER_CHUNK).join(procs, how="cross")
            yield steps.join(template, on="variant").with_columns(
                pid=FIRST_PID + pl.col("device"),
                t0=pl.col("offset") + pl.col("device") * PROCESS_SKEW_NS,
            )


def thread_offset(slot: int) -> int:
    """The thread id of thread slot `slot`, relative to the process id."""
    return 0 if slot == gpt.MAIN else AUTOGRAD_TID_OFFSET + slot - gpt.AUTOGRAD


def _thread_gtid(thread: pl.Expr) -> pl.Expr:
    """globalTid of thread slot `thread` of process `pid`."""
    offset = pl.when(thread == gpt.MAIN).then(0).otherwise(AUTOGRAD_TID_OFFSET - 1 + thread)
    return global_pid(0) + pl.col("pid") * (1 << 24) + pl.col("pid") + offset


def _inline_name(plan: Plan) -> pl.Expr:
    """`aten::addmm, seq = 12, op_id = 40, sizes = [...]`, each part only when set."""
    stashed = pl.when(pl.col("stashed")).then(pl.lit("stashed ")).otherwise(pl.lit(""))
    seq = pl.col("step") * plan.n_seq + pl.col("seq") + 1
    op_id = pl.col("step") * plan.n_op_ids + pl.col("op_id") + 1
    parts = [
        pl.col("text"),
        pl.when(pl.col("seq").is_not_null()).then(pl.format(", {}seq = {}", stashed, seq)),
        pl.when(pl.col("op_id").is_not_null()).then(pl.format(", op_id = {}", op_id)),
        pl.when(pl.col("sizes").is_not_null()).then(", sizes = " + pl.col("sizes")),
    ]
    return pl.concat_str(parts, ignore_nulls=True)


def _nvtx(plan: Plan) -> Iterator[pl.DataFrame]:
    """Domain-create events, then push/pop ranges: inline text or registered strings."""
    domains = [
        (100 + p, name, global_tid(FIRST_PID + p, FIRST_PID + p), domain)
        for p in range(plan.processes)
        for domain, name in ((gpt.NSYSMAP_DOMAIN, "nsysmap"), (gpt.NCCL_DOMAIN, "NCCL"))
    ]
    yield pl.DataFrame(
        domains, schema=["start", "text", "globalTid", "domainId"], orient="row"
    ).select(
        "start",
        end=pl.lit(None, pl.Int64),
        eventType=pl.lit(75, pl.Int64),
        text="text",
        globalTid="globalTid",
        textId=pl.lit(None, pl.Int64),
        domainId="domainId",
    )
    for tiled in plan.tiled("ranges"):
        registered = pl.col("registered").is_not_null()
        step = pl.col("step_range").fill_null(False)
        text_id = pl.when(step).then(plan.step_text_id + pl.col("step"))
        yield tiled.select(
            start=pl.col("t0") + pl.col("start"),
            end=pl.col("t0") + pl.col("end"),
            eventType=pl.lit(59, pl.Int64),
            text=pl.when(~registered).then(_inline_name(plan)),
            globalTid=_thread_gtid(pl.col("thread")),
            textId=text_id.when(registered).then(plan.string_ids("text")),
            domainId=pl.col("registered").fill_null(0),
        ).sort("start", maintain_order=True)


def _runtime(plan: Plan, *, twins: bool) -> Iterator[pl.DataFrame]:
    """CUDA API calls; with `twins`, each followed by its eventClass 67 backtrace twin."""
    for tiled in plan.tiled("calls"):
        calls = tiled.select(
            start=pl.col("t0") + pl.col("start"),
            end=pl.col("t0") + pl.col("end"),
            eventClass=pl.lit(0, pl.Int64),
            globalTid=_thread_gtid(pl.col("thread")),
            correlationId=pl.col("step") * plan.n_calls + pl.col("local") + 1,
            nameId=plan.string_ids("api"),
            _twin=pl.col("api").str.replace(r"_v\d+$", ""),
        )
        if twins:
            twin = calls.with_columns(
                eventClass=pl.lit(TWIN_CLASS, pl.Int64), nameId=plan.string_ids("_twin")
            )
            calls = pl.concat([calls, twin])
        yield calls.drop("_twin").sort("start", maintain_order=True)


def _gpu(plan: Plan, kind: str) -> Iterator[pl.DataFrame]:
    """Kernels, memcpys or memsets: on the process's own device, in start order."""
    for tiled in plan.tiled("gpu"):
        ops = tiled.filter(pl.col("kind") == kind)
        common = {
            "start": pl.col("t0") + pl.col("start"),
            "end": pl.col("t0") + pl.col("end"),
            "deviceId": pl.col("device"),
            "contextId": pl.lit(1, pl.Int64),
            "streamId": pl.col("stream"),
            "correlationId": pl.col("step") * plan.n_calls + pl.col("corr") + 1,
            "globalPid": global_pid(0) + pl.col("pid") * (1 << 24),
        }
        if kind == "kernel":
            texts = {
                "demangledName": [v[0] for v in gpt.KERNELS.values()],
                "shortName": [v[1] for v in gpt.KERNELS.values()],
            }
            extra: dict[str, pl.Expr | int] = {
                col: pl.col("kernel").replace_strict(
                    list(gpt.KERNELS), [plan.strings[t] for t in names], return_dtype=pl.Int64
                )
                for col, names in texts.items()
            }
            extra |= {
                "gridX": pl.lit(1024, pl.Int64),
                "gridY": 1,
                "gridZ": 1,
                "blockX": 256,
                "blockY": 1,
                "blockZ": 1,
            }
        elif kind == "memcpy":
            extra = {"bytes": pl.col("bytes"), "copyKind": pl.lit(1, pl.Int64)}
        else:
            extra = {"value": pl.lit(0, pl.Int64), "bytes": pl.col("bytes")}
        yield ops.select(**common, **extra).sort("start", maintain_order=True)


def gpt_tables(
    n_kernels: int,
    *,
    seed: int = 0,
    n_layer: int = 12,
    processes: int = 2,
    twins: bool = False,
    template: Callable[[int, random.Random], gpt.Template] = gpt.step_template,
    thread_names: tuple[str, ...] = THREAD_NAMES,
) -> dict[str, Frame | Iterator[pl.DataFrame]]:
    """The tables of a GPT-2-like export with about `n_kernels` kernels (whole steps).

    `template` builds one step of one process (variants of the step draw
    their costs from the random generator it is given); `thread_names` names
    its thread slots (gpt.MAIN, gpt.AUTOGRAD, then any others it uses).
    """
    plan = Plan(
        n_kernels,
        seed=seed,
        n_layer=n_layer,
        processes=processes,
        template=template,
        thread_names=thread_names,
    )
    strings = [*plan.strings, *(f"nsysmap:step:{s}" for s in range(plan.steps))]
    threads = [
        (plan.strings[name], global_tid(FIRST_PID + p, FIRST_PID + p + thread_offset(slot)))
        for p in range(processes)
        for slot, name in enumerate(thread_names)
    ]
    return {
        "StringIds": pl.DataFrame({"id": range(len(strings)), "value": strings}),
        "ThreadNames": pl.DataFrame(threads, schema=["nameId", "globalTid"], orient="row"),
        "TARGET_INFO_GPU": pl.DataFrame(
            {
                "vmId": [0] * processes,
                "id": range(processes),
                "name": [_DEVICE] * processes,
                "totalMemory": [80 << 30] * processes,
                "smCount": [132] * processes,
                "computeMajor": [9] * processes,
                "computeMinor": [0] * processes,
            }
        ),
        "META_DATA_EXPORT": pl.DataFrame(
            {
                "name": ["EXPORT_PRODUCT_VERSION", "EXPORT_SCHEMA_VERSION"],
                "value": [NSYS_VERSION, "3.25.0"],
            }
        ),
        "CUPTI_ACTIVITY_KIND_KERNEL": _gpu(plan, "kernel"),
        "CUPTI_ACTIVITY_KIND_MEMCPY": _gpu(plan, "memcpy"),
        "CUPTI_ACTIVITY_KIND_MEMSET": _gpu(plan, "memset"),
        "CUPTI_ACTIVITY_KIND_RUNTIME": _runtime(plan, twins=twins),
        "NVTX_EVENTS": _nvtx(plan),
    }


def with_ranges(tables: dict, ranges: pl.DataFrame, thread: int) -> dict:
    """`tables` (gpt_tables) with push/pop `ranges` (start, end, text) of serialized
    thread id `thread` added to NVTX_EVENTS, written last (as an exporter writes a
    range when it closes); NVTX_EVENTS becomes one frame."""
    nvtx = tables["NVTX_EVENTS"]
    nvtx = nvtx if isinstance(nvtx, pl.DataFrame) else pl.concat(list(nvtx))
    added = ranges.select("start", "end", "text").with_columns(
        eventType=pl.lit(59, pl.Int64),
        globalTid=pl.lit(thread, pl.Int64),
        textId=pl.lit(None, pl.Int64),
        domainId=pl.lit(0, pl.Int64),
    )
    return {**tables, "NVTX_EVENTS": pl.concat([nvtx, added.select(nvtx.columns)])}
