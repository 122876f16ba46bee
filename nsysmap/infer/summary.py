"""What inference found, as tables and lines (pure), and how it agrees with measured ranges.

`by_inferred_block` is GPU time per device, inferred phase and inferred block
(null block: time outside the repeated blocks), so it adds up to the device's
total like every other summary. `agreement` compares inferred labels with
the step, phase and module the profile's own ranges gave, where they exist.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from instrument.phase_vocabulary import INFERRED_OF
from nsysmap.core.coded import coded, decoded, lexical_rank, texts
from nsysmap.core.inferred_schemas import BY_INFERRED_BLOCK
from nsysmap.core.units import operation_word, time_unit
from nsysmap.infer.label import Found, infer, infer_sequences
from nsysmap.infer.sequence import READ, sequence_query

# Measured phases in the inferred vocabulary (loss belongs to the forward graph).
PHASE_MAP = INFERRED_OF  # a named phase as the inferred one (instrument/phase_vocabulary.py)
AGREEMENT = pl.Schema(
    {"device_id": pl.Int64, "what": pl.String, "measured_ns": pl.Int64, "agreeing_ns": pl.Int64}
)
# A layer index in a module path: transformer.h.3.attn, model.layers.10, blocks.0.mlp,
# or a module instance of torch.profiler's module tree: BertEncoder_0.BertLayer_3.
LAYER_INDEX = r"(?:(?:^|\.)(?:h|layers?|blocks?)\.|(?:Layer|Block)_)(\d+)(?:\.|$)"
# Below this confidence, or with less than PLACED_WEAK of the time placed, the line says
# the inference is weak and gives no exact-looking numbers.
CONFIDENCE_WEAK = 0.8
PLACED_WEAK = 0.5
GUESS = "treat as a guess"


@dataclass(frozen=True)
class Inferred:
    """Inferred labels per op (INFERRED), the block table and the summary lines."""

    labels: pl.DataFrame
    by_inferred_block: pl.DataFrame
    found: tuple[Found, ...]
    agreement: pl.DataFrame  # device_id, what, measured_ns, agreeing_ns

    def tables(self) -> dict[str, pl.DataFrame]:
        return {"inferred": self.labels, "by_inferred_block": self.by_inferred_block}

    def lines(self, passes: bool = True, *, cpu: bool) -> list[str]:
        """One line per sequence; `passes` False: without the count of passes where the
        finding is strong (the structure model, nsysmap.structure, counts them). `cpu`:
        the operations are CPU operators, timed by their self time (a trace without GPU
        work), not kernels timed on the GPU."""
        blocks, agree = self.by_inferred_block, self.agreement
        return [_line(f, blocks, agree, passes, cpu=cpu) for f in self.found]


# The OPS columns the summaries of inference read (of each op, besides its labels).
MEASURED = ("op_id", "device_id", "dur_ns", "short_name", "step", "phase", "module")
# The texts of MEASURED as codes: grouped by, a text would be copied into every row's
# key (a kernel name's length times its operations).
_CODES = coded(["short_name", "phase", "module"])
# The OPS columns inference reads (`infer_ops`).
INFER_COLUMNS: tuple[str, ...] = (*READ, *(c for c in MEASURED if c not in READ))


def infer_ops(ops: pl.DataFrame) -> Inferred:
    """Inferred steps, phases and blocks of an OPS frame, with their summaries."""
    labels, found = infer(ops)
    return _summarised(ops.select(MEASURED).with_columns(_CODES), labels, found)


def infer_scan(ops: pl.LazyFrame) -> Inferred:
    """`infer_ops` of the rows of a lazy OPS frame (one device of ops.parquet), read in
    two passes of a few columns each: what the kernel sequence needs
    (nsysmap.infer.sequence), then, once the labels are found, MEASURED."""
    # Polars' streaming engine reads the file a morsel at a time: the names and texts
    # that become flags and codes are never all decoded at once.
    labels, found = infer_sequences(sequence_query(ops).collect(engine="streaming"))
    measured = ops.select(MEASURED).with_columns(_CODES).collect(engine="streaming")
    return _summarised(measured, labels, found)


def _summarised(measured: pl.DataFrame, labels: pl.DataFrame, found: list[Found]) -> Inferred:
    """The Inferred of `labels` and `found`, summarised against the MEASURED columns."""
    joined = _joined(measured, labels)
    return Inferred(labels, by_inferred_block(joined), tuple(found), agreement(joined))


def _joined(measured: pl.DataFrame, labels: pl.DataFrame) -> pl.DataFrame:
    """`measured` with each op's labels (those the summaries read), in `measured`'s order.

    Where `measured` is in op_id order (ops.parquet is), the labels are sorted
    by op_id and put alongside, not joined (no copy of `measured`).
    """
    read = labels.drop("inferred_part")
    ids = measured["op_id"]
    if ids.len() == read.height and _increasing(ids):
        aligned = read.sort("op_id")
        if aligned["op_id"].equals(ids):
            return measured.hstack(aligned.drop("op_id", "device_id").get_columns())
    return measured.join(read, on=["op_id", "device_id"], how="left", nulls_equal=True)


def _increasing(ids: pl.Series) -> bool:
    """Are `ids` strictly increasing (and none null)?"""
    steps = ids.diff().drop_nulls()
    return ids.null_count() == 0 and (steps.is_empty() or bool(steps.min() > 0))  # type: ignore[operator]


def combined(parts: list[Inferred]) -> Inferred:
    """One Inferred from those of disjoint sets of devices, in ascending device order.

    Inference looks at each device's kernel sequence on its own, so a large
    profile can be inferred a device at a time (a lower peak) with the same
    tables.
    """
    if len(parts) == 1:
        return parts[0]
    return Inferred(
        pl.concat([p.labels for p in parts]),
        pl.concat([p.by_inferred_block for p in parts]),
        tuple(f for p in parts for f in p.found),
        pl.concat([p.agreement for p in parts]),
    )


def by_inferred_block(joined: pl.DataFrame) -> pl.DataFrame:
    keys = ["device_id", "inferred_phase", "inferred_region", "inferred_block"]
    per_name = (
        joined.with_columns(coded(texts(joined, ["short_name"])))
        .group_by([*keys, "short_name"])
        .agg(pl.col("dur_ns").sum())
    )
    top = (
        per_name.with_columns(_text=lexical_rank(per_name["short_name"]))
        .sort(["dur_ns", "_text"], descending=[True, False], nulls_last=True)
        .group_by(keys, maintain_order=True)  # a tie: the first name, so every run agrees
        .agg(pl.col("short_name").first().alias("top_kernel"))
    )
    top = decoded(top, ["top_kernel"])
    table = joined.group_by(keys).agg(
        pl.len().cast(pl.Int64).alias("ops"),
        pl.col("dur_ns").sum().alias("time_ns"),
        confidence=(pl.col("inferred_confidence") * pl.col("dur_ns")).sum()
        / pl.col("dur_ns").sum().clip(lower_bound=1),
    )
    total = pl.col("time_ns").sum().over("device_id")
    return (
        table.join(top, on=keys, how="left", nulls_equal=True)
        .with_columns(time_share=pl.col("time_ns") / total)
        .select(BY_INFERRED_BLOCK.names())
        .cast(BY_INFERRED_BLOCK)
        .sort(keys, nulls_last=True)
    )


def agreement(joined: pl.DataFrame) -> pl.DataFrame:
    """Per device and label: GPU time with a measured label, and the part inference agrees on.

    Phases compare through PHASE_MAP; blocks with the layer index in the
    measured module path (less the device's usual offset between the two:
    `_offsets`); steps through the measured step most of each
    inferred step's time has (step numbers themselves are arbitrary). Each is
    worked out on the time per distinct pair of measured and inferred label,
    not per operation.
    """
    if joined.select(pl.all_horizontal(pl.col("step", "phase", "module").is_null().all())).item():
        return pl.DataFrame(schema=AGREEMENT)  # nothing measured to compare with
    lazy = joined.lazy()  # filtered lazily: only the columns each pair reads are copied
    phase = _pairs(lazy.filter(pl.col("phase").is_in(list(PHASE_MAP))), "phase").select(
        "device_id",
        "dur_ns",
        ok=pl.col("phase").replace_strict(PHASE_MAP) == pl.col("inferred_phase"),
    )
    layer = pl.col("module").str.extract(LAYER_INDEX).cast(pl.Int64)
    blocks = (
        _pairs(lazy.filter(pl.col("module").is_not_null()), "module", "inferred_block")
        .with_columns(layer=layer)
        .filter(pl.col("layer").is_not_null())
    )
    block = blocks.join(_offsets(blocks), on="device_id", how="left").select(
        "device_id",
        "dur_ns",
        ok=(pl.col("layer") - pl.col("offset").fill_null(0) == pl.col("inferred_block")).fill_null(
            False
        ),
    )
    steps = _pairs(lazy.filter(pl.col("step").is_not_null()), "step", "inferred_step")
    step = (
        steps.join(
            _usual(steps, "inferred_step", "step"),
            on=["device_id", "inferred_step"],
            nulls_equal=True,
        )
        .join(
            _usual(steps, "step", "inferred_step"),
            on=["device_id", "step"],
            suffix="_back",
            nulls_equal=True,
        )
        .select(
            "device_id",
            "dur_ns",
            ok=(pl.col("step") == pl.col("usual"))
            & (pl.col("inferred_step") == pl.col("usual_back")),
        )
    )
    parts = [
        f.with_columns(what=pl.lit(w))
        for f, w in ((step, "step"), (phase, "phase"), (block, "block"))
    ]
    return (
        pl.concat(parts)
        .group_by("device_id", "what", maintain_order=True)
        .agg(measured_ns=pl.col("dur_ns").sum(), agreeing_ns=pl.col("dur_ns").filter("ok").sum())
    )


def _offsets(blocks: pl.DataFrame) -> pl.DataFrame:
    """Per device, the layer index minus the inferred block's that most time has: a
    profile that opens inside a model (a window of a run) numbers its first whole
    block 0 where its module says 3."""
    return (
        blocks.filter(pl.col("inferred_block").is_not_null())
        .group_by("device_id", offset=pl.col("layer") - pl.col("inferred_block"))
        .agg(pl.col("dur_ns").sum())
        .sort("dur_ns", "offset", descending=[True, False])
        .group_by("device_id", maintain_order=True)
        .agg(pl.col("offset").first())
    )


def _pairs(ops: pl.LazyFrame, measured: str, inferred: str | None = None) -> pl.DataFrame:
    """GPU time per device and distinct pair of a measured and an inferred label."""
    inferred = inferred or f"inferred_{measured}"
    pairs = ops.group_by("device_id", measured, inferred).agg(pl.col("dur_ns").sum()).collect()
    if pairs.schema[measured] == pl.Categorical:  # read as codes (`infer_scan`)
        return pairs.with_columns(pl.col(measured).cast(pl.String))
    return pairs


def _usual(steps: pl.DataFrame, by: str, other: str) -> pl.DataFrame:
    """For each `by` value, the `other` value holding most of its time (as `usual`)."""
    return (
        steps.group_by("device_id", by, other)
        .agg(pl.col("dur_ns").sum())
        .sort("dur_ns", descending=True, maintain_order=True)
        .group_by("device_id", by, maintain_order=True)
        .agg(pl.col(other).first().alias("usual"))
    )


def _line(
    found: Found, blocks: pl.DataFrame, agree: pl.DataFrame, count: bool = True, *, cpu: bool
) -> str:
    device = blocks.filter(pl.col("device_id").eq_missing(found.device_id))
    in_blocks = float(device.filter(pl.col("inferred_block").is_not_null())["time_share"].sum())
    placed = float(device.filter(pl.col("inferred_region").is_not_null())["time_share"].sum())
    weak = not found.regions or found.confidence < CONFIDENCE_WEAK or placed < PLACED_WEAK
    head = f"device {'unknown' if found.device_id is None else found.device_id} (inferred"
    passes = f"{found.steps} pass{'es' if found.steps != 1 else ''}"
    if weak:
        line = _weak_line(found, head, cpu)
    else:
        kind = "forward and backward" if found.backward else "forward only"
        kind = f", {kind}" if found.network else ""
        said = f"{passes}{kind}" if count else kind.removeprefix(", ") or "repeats"
        line = (
            f"{head}): {said}; {_blocks(found, cpu)}{' per pass' if found.network else ''};"
            f" {in_blocks:.0%} of {time_unit(cpu)} in {'blocks' if found.network else 'repeats'},"
            f" {placed - in_blocks:.0%} before,"
            f" between or after them; confidence {found.confidence:.2f}"
        )
    rows = agree.filter(pl.col("device_id").eq_missing(found.device_id), pl.col("measured_ns") > 0)
    shares = [
        f"{r['what']} {r['agreeing_ns'] / r['measured_ns']:.0%}" for r in rows.iter_rows(named=True)
    ]
    return line + (f"; agrees with the profile's ranges: {', '.join(shares)}" if shares else "")


def _weak_line(found: Found, head: str, cpu: bool) -> str:
    """The line of a weak inference. Never "passes": the structure's line counts the
    forward and backward passes, which the sequence's repeats need not be."""
    confidence = f"confidence {found.confidence:.1f}"
    repeats = f"the sequence of {operation_word(cpu, True)} repeats {found.steps} times"
    if not found.regions and found.steps > 1 and found.confidence >= CONFIDENCE_WEAK:
        # The sequence repeats; only blocks inside it are not found.
        return f"{head}, weak): {repeats}, with no repeating blocks in it ({confidence}); {GUESS}"
    best = _blocks(found, cpu)
    if found.steps > 1:
        best = f"{repeats}, with {best} in it" if found.regions else repeats
    best = f"at best {best}, " if found.regions or found.steps > 1 else ""
    line = f"{head}, weak): no clear repeating structure ({best}{confidence}); {GUESS}"
    if found.backward and not found.regions:  # no mirrored motif: the threads said it
        line += "; backward: what autograd's thread launched"
    return line


def _blocks(found: Found, cpu: bool) -> str:
    if not found.regions:
        return "no repeating blocks"
    # A motif with a copy or a memset in it counts operations, not kernels.
    copies = found.copies or (False,) * len(found.regions)
    ops = [operation_word(cpu, copy) for copy in copies]
    if not found.network:  # no layers: repeats of a motif
        return " and ".join(
            f"{r.repeats} repeats of {r.length} {word}"
            for r, word in zip(found.regions, ops, strict=True)
        )
    names = ("forward", "mirrored backward") if found.backward else ("repeating",)
    return " and ".join(
        f"{r.repeats} {name} blocks of {r.length} {word}"
        for r, name, word in zip(found.regions, names, ops, strict=False)
    )
