"""Each device's kernel sequence as inference reads it: a few small columns per op.

Inference (nsysmap.infer.label) reads, of every operation, its ids, launching
thread and stream, its launch order, a normalised kernel key and a few
flags that its kind, category and name say. `SEQUENCE` works them out in one
query over the OPS rows, so that a large profile's ops.parquet is read back a
device at a time with only these columns (no names, no measured labels, no
time columns but the order); `sequences` puts the rows in launch order and
codes the keys.
"""

from __future__ import annotations

import polars as pl

from instrument.phase_vocabulary import INFERRED_PHASES
from nsysmap.intervals.packed_sort import packed_order

# forward, backward, optimizer, data, other (instrument/phase_vocabulary.py)
PHASES = INFERRED_PHASES
_FWD, _BWD, _OPT, _DATA, _OTHER = range(len(PHASES))
# Categories whose kernel the library picks per shape: matched on the category alone.
BY_CATEGORY = ("gemm", "attention", "convolution")
# Kernels of a neural network: without any, a repeated motif is no forward pass (a CUDA
# sample launching vecAdd over and over repeats, nothing more).
NETWORK: tuple[str, ...] = ("gemm", "attention", "convolution", "normalization", "softmax")
NETWORK += ("routing", "optimizer")
# Kernels of a model's layers: a repeated motif without any is no layer where the pass
# has some (a metric's update repeated per metric).
LAYER_KERNELS = tuple(c for c in NETWORK if c != "optimizer")
# A copy between host and device (nsys: `[CUDA memcpy DtoH]`; torch.profiler: `Memcpy
# HtoD (Pageable -> Device)`): a long launch gap right after one is the host waiting.
HOST_COPY = r"DtoH|Device -> Host|HtoD|Host -> Device"
# Kernels that only a backward pass launches.
BACKWARD_KERNEL = r"(?i)backward|_bwd|bwd_|dgrad|wgrad"
# The OPS columns the sequence is worked out from (tid may be missing: none known).
READ: tuple[str, ...] = (
    "op_id",
    "device_id",
    "pid",
    "tid",
    "stream_id",
    "kind",
    "category",
    "name",
)
READ += ("short_name", "start_ns", "launch_start_ns")
ORDER = ["device_id", "pid", "order_ns", "op_id"]


def key_expr(category: str = "key_category", name: str = "key_name") -> pl.Expr:
    """The normalised kernel key that motifs are matched on, of a `category` and a `name`
    (the short name, else the name: `sequence_query`'s key_name)."""
    short = pl.col(name).fill_null("").str.replace_all(r"\d+", "#")
    by_category = pl.col(category).is_in(BY_CATEGORY)
    return pl.when(by_category).then(pl.col(category)).otherwise(short)


def sequence_query(ops: pl.LazyFrame) -> pl.LazyFrame:
    """Per op: op_id, device_id, pid and stream_id (null: -1), tid, order_ns (its
    launch, else its start), special (the phase the op itself says: `special_phase`),
    backish (a backward-only kernel name), host_copy, layer, network (a layer's or a
    network's kernel), and key_category and key_name, from which `sequences` codes the
    key (`key_expr`) once per distinct pair."""
    names = ops.collect_schema().names()
    tid = pl.col("tid") if "tid" in names else pl.lit(None, pl.Int64).alias("tid")
    kind = pl.col("kind").cast(pl.String)
    return ops.select(
        "op_id",
        "device_id",
        pl.col("pid").fill_null(-1),
        tid,
        pl.col("stream_id").fill_null(-1),
        order_ns=pl.coalesce("launch_start_ns", "start_ns"),
        special=special_phase(),
        backish=pl.col("name").fill_null("").str.contains(BACKWARD_KERNEL),
        host_copy=((kind == "memcpy") & pl.col("name").str.contains(HOST_COPY)).fill_null(False),
        layer=pl.col("category").is_in(LAYER_KERNELS).fill_null(False),
        network=pl.col("category").is_in(NETWORK).fill_null(False),
        key_category=pl.col("category").cast(pl.Categorical),
        key_name=pl.coalesce("short_name", "name").cast(pl.Categorical),
    )


def special_phase() -> pl.Expr:
    """Phases known from the op itself: optimizer kernels, copies and fills (data); -1."""
    return (
        pl.when(pl.col("category") == "optimizer")
        .then(_OPT)
        .when(pl.col("kind").cast(pl.String).is_in(["memcpy", "memset"]))
        .then(_DATA)
        .otherwise(-1)
        .cast(pl.Int8)
    )


def sequences(frame: pl.DataFrame) -> pl.DataFrame:
    """`sequence_query`'s rows sorted by device, pid, launch order and op_id (not sorted
    again when they are), with `code` (the key's dense rank among the rows' keys,
    worked out once per distinct category and name) and `gap_ns` (since the
    sequence's previous op).

    The rows are not copied but by the sort, and only when it is needed.
    """
    frame = frame.with_columns(_pair=_pair_id())
    pairs = frame.select("_pair", "key_category", "key_name").unique("_pair")
    keys = pairs.cast({"key_category": pl.String, "key_name": pl.String}).select(
        "_pair", code=key_expr().rank("dense").cast(pl.Int64)
    )
    code = frame["_pair"].replace_strict(keys["_pair"], keys["code"]).alias("code")
    frame = frame.drop("_pair", "key_category", "key_name").with_columns(code)
    if not in_order(frame, ORDER):
        frame = _sorted(frame)
    by = ["device_id", "pid"]
    gap = (pl.col("order_ns") - pl.col("order_ns").shift(1).over(by)).clip(lower_bound=0)
    return frame.with_columns(gap_ns=gap.fill_null(0))


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame.sort(ORDER)`, by one packed key where device ids are all known (a sort
    puts null devices first, the packed key last) and op ids tell rows apart."""
    unique = frame["op_id"].n_unique() == frame.height
    if frame["device_id"].null_count() or not unique:
        return frame.sort(ORDER)
    order = packed_order(frame, ORDER[:2], ORDER[2], ORDER[3:])
    return frame.sort(ORDER) if order is None else frame[order]


def _pair_id() -> pl.Expr:
    """One integer per distinct (key_category, key_name) pair, from their codes."""
    category = (pl.col("key_category").to_physical().cast(pl.Int64) + 1).fill_null(0)
    name = (pl.col("key_name").to_physical().cast(pl.Int64) + 1).fill_null(0)
    return category * (1 << 32) + name


def parts(seq: pl.DataFrame) -> list[pl.DataFrame]:
    """The sequences of `sequences`'s rows, one per device and pid, as slices (no copy)."""
    runs = (
        seq.select(pl.struct("device_id", "pid").rle().struct.field("len"))
        .to_series()
        .cum_sum()
        .to_list()
    )
    return [seq.slice(lo, hi - lo) for lo, hi in zip([0, *runs[:-1]], runs, strict=True)]


def in_order(frame: pl.DataFrame, keys: list[str]) -> bool:
    """Are `frame`'s rows sorted by `keys` (ascending, no nulls among them)?"""
    if frame.select(pl.any_horizontal(pl.col(keys).is_null().any())).item():
        return False
    after: pl.Expr = pl.lit(True)  # rows equal on every key: in order
    for key in reversed(keys):
        before = pl.col(key).shift(1)
        after = (before < pl.col(key)) | ((before == pl.col(key)) & after)
    return bool(frame.select(after.fill_null(True).all()).item())
