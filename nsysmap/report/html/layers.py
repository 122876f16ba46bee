"""Charts of time per block and per layer, and of the module (or range) tree (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from nsysmap.core.inert import plotly_text, plotly_texts
from nsysmap.core.scalars import to_float, to_int
from nsysmap.report.blocks import block_totals, part_label, part_order
from nsysmap.report.html import tree
from nsysmap.report.html.chart import (
    PHASE_COLOURS,
    SERIES,
    TOP_ROWS,
    Chart,
    bar,
    category_axis,
    chart,
    first_rows,
    markers,
    ms,
    ratio,
    right_axis,
    stacked,
    table,
)
from nsysmap.report.html.names import distinct_labels, middle

if TYPE_CHECKING:
    from nsysmap.report.answers import Findings

LAYER_LABEL = 32  # characters of a layer's name on the axis (whole on hover)
TREE_LABEL = 24  # characters of a name in a box of the tree (its whole path on hover)
PART_COLOURS = dict(zip(("attn", "mlp", "ln_1", "ln_2", ""), SERIES, strict=False))
# The columns of each chart's table, and how each sorts and shows.
BLOCK_PHASE_COLUMNS = (
    ("block", "text"),
    ("class", "text"),
    ("forward", "ms"),
    ("backward", "ms"),
    ("no direction", "ms"),
    ("total", "ms"),
)
BLOCK_PARTS_COLUMNS = (
    ("block", "text"),
    ("part", "text"),
    ("class", "text"),
    *BLOCK_PHASE_COLUMNS[2:],
    ("TFLOP/s", "number"),
    ("MFU", "share"),
)
RATES_COLUMNS = (
    ("layer", "text"),
    ("class", "text"),
    ("modules", "number"),
    ("time", "ms"),
    ("matmul FLOPs", "number"),
    ("TFLOP/s", "number"),
    ("MFU", "share"),
)


def per_step(f: Findings) -> tuple[int, str]:
    """(divisor, unit) for time: per step when the run has steps."""
    return (f.steps, "ms per step") if f.steps else (1, "ms")


def blocks_phase_chart(f: Findings) -> Chart | None:
    """Each block (`h.0` … `h.11`) as a bar split into forward calls, backward calls and
    work of no known direction."""
    totals = block_totals(f.module_phase)
    if totals.is_empty():
        return None
    steps, unit = per_step(f)
    names = totals["block"].to_list()
    columns = {p: [ms(v / steps) for v in totals[f"{p}_ns"]] for p in ("forward", "backward")}
    columns["no direction"] = [ms(v / steps) for v in totals["other_ns"]]
    drawn, cut = first_rows(len(names), "blocks")
    x = plotly_texts(names[:drawn])
    data = [
        bar(p, x, columns[p][:drawn], PHASE_COLOURS[p])
        for p in ("forward", "backward", "no direction")
    ]
    rows = [
        [name, c, fw, bw, other, ms(t / steps)]
        for name, c, fw, bw, other, t in zip(
            names,
            totals["block_class"],
            columns["forward"],
            columns["backward"],
            columns["no direction"],
            totals["time_ns"],
            strict=True,
        )
    ]
    return chart(
        "blocks_phase",
        "Per block: forward and backward calls",
        "Each numbered block with every module below it; forward and backward are the time in "
        "forward and in backward calls, whatever the phase; devices pooled." + cut,
        heading="Time per block by call direction",
        data=data,
        rows=table(
            BLOCK_PHASE_COLUMNS,
            rows,
        ),
        **stacked("block", unit),
    )


def blocks_parts_chart(f: Findings) -> Chart | None:
    """Each block as a bar split into its parts (attention, MLP, norms, its own operations)."""
    if f.blocks.is_empty():
        return None
    steps, unit = per_step(f)
    names = block_totals(f.module_phase)["block"].to_list()
    drawn, cut = first_rows(len(names), "blocks")
    names = names[:drawn]
    times = {(r["block"], r["part"]): r["time_ns"] for r in f.blocks.iter_rows(named=True)}
    data, rows, x = [], [], plotly_texts(names)
    for i, part in enumerate(part_order(f.blocks)):
        y = [ms(times.get((b, part), 0) / steps) for b in names]
        colour = PART_COLOURS.get(part, SERIES[i % len(SERIES)])
        data.append(bar(plotly_text(part_label(part)), x, y, colour))
    for r in f.blocks.iter_rows(named=True):
        rows.append(
            [
                r["block"],
                part_label(r["part"]),
                r["part_class"],
                ms(r["forward_ns"] / steps),
                ms(r["backward_ns"] / steps),
                ms(r["other_ns"] / steps),
                ms(r["time_ns"] / steps),
                ratio(r["tflops_per_s"]),
                ratio(r["mfu"]),
            ]
        )
    return chart(
        "blocks_parts",
        "Per block: attention, MLP, norms",
        "Parts are each block's direct children with the modules below them; "
        "(own) is the block's own operations." + cut,
        heading="Time per block by part",
        data=data,
        rows=table(
            BLOCK_PARTS_COLUMNS,
            rows,
        ),
        **stacked("block", unit),
    )


# The icicle's branch colours: none of them a phase's (instrument/phase_vocabulary.py).
TREE_COLOURS = ("#5f7d95", "#a08c6e", "#6f9a8d", "#8f7aa3")


def tree_chart(f: Findings) -> Chart | None:
    """An icicle of time over the module tree, or the range tree when there are no modules."""
    ops = f.run.ops
    if ops["module"].is_not_null().any():
        root = ops.filter(pl.col("module") == "")["module_class"].drop_nulls()
        nodes = tree.tree(tree.module_paths(ops, root[0] if len(root) else "(model)"), ".", 1)
        what = "module tree"
    elif ops["range_path"].is_not_null().any():
        nodes = tree.tree(tree.range_paths(ops, f.run.by_range), " > ")
        what = "range tree"
    else:
        return None
    nodes = tree.without_lone_root(nodes)
    steps, unit = per_step(f)
    inclusive = [ms(v / steps) for v in nodes["inclusive_ns"]]
    trace = {
        "type": "icicle",
        "ids": nodes["id"].to_list(),
        "parents": nodes["parent"].to_list(),
        "labels": [plotly_text(middle(x, TREE_LABEL)) for x in nodes["label"]],
        "values": [ms(v / steps) for v in nodes["own_ns"]],
        "branchvalues": "remainder",
        "customdata": plotly_texts(nodes["path"]),
        "hovertemplate": "%{customdata}<br>%{value:.3f} " + unit + "<extra></extra>",
        "maxdepth": drawn_depth(nodes),
        # Each box says its name and its time with what lies below it.
        "text": [f"{v:,.3f} {unit}" if v is not None else "" for v in inclusive],
        "texttemplate": "%{label}<br>%{text}",
        "textinfo": "label+text",
        "root": {"color": "#f4f4f4"},
    }
    rows = [
        [p or "(all)", ms(o / steps), i]
        for p, o, i in zip(nodes["path"], nodes["own_ns"], inclusive, strict=True)
    ]
    return chart(
        "tree",
        f"Time over the {what}",
        f"Click a box to zoom into it, the top bar to go back; {unit}, devices pooled.",
        heading=f"Time over the {what}",
        data=[trace],
        rows=table([("path", "text"), ("own", "ms"), ("inclusive", "ms")], rows),
        margin={"l": 10, "r": 10, "t": 46, "b": 10},
        height=620,
        uniformtext={"minsize": 8, "mode": "hide"},  # no text in slivers
        # Branches in colours no phase uses: a blue or orange box here must not
        # read as forward or backward beside the phase charts.
        iciclecolorway=list(TREE_COLOURS),
        extendiciclecolors=True,
    )


def drawn_depth(nodes: pl.DataFrame, share: float = 0.05) -> int:
    """Levels the icicle shows at once: down to its deepest node with `share` of the time
    (at least 3, at most 10)."""
    big = tree.depth(nodes).filter(
        nodes["inclusive_ns"] >= share * to_float(nodes["inclusive_ns"].max())
    )
    return min(max(to_int(big.max() or 0), 3), 10)


def rates_chart(f: Findings) -> Chart | None:
    """Achieved TFLOP/s (and MFU when the peak is known) per layer with matmul FLOPs."""
    if f.source is None:
        return None
    layers = f.layers.filter(pl.col("matmul_flop") > 0)
    if layers.is_empty():
        return None
    names = [x or "(root)" for x in layers["layer"]]
    drawn = top_layers(layers)
    full = [x or "(root)" for x in drawn["layer"]]
    x = plotly_texts(distinct_labels(full, LAYER_LABEL))
    data = [bar("TFLOP/s", x, [ratio(v) for v in drawn["tflops_per_s"]], "#1f77b4")]
    data[0].update(
        customdata=plotly_texts(full),
        hovertemplate="%{customdata}<br>%{y:.3f} TFLOP/s<extra></extra>",
    )
    extra: dict[str, dict[str, Any]] = {}
    if layers["mfu"].is_not_null().any():
        mfu = [ratio(v) for v in drawn["mfu"]]
        data.append(markers("MFU", x, mfu, "#d62728", yaxis="y2"))
        extra["yaxis2"] = right_axis("MFU (% of peak)", tickformat=".0%", rangemode="tozero")
    rows = [
        [
            n,
            r["module_class"],
            r["modules"],
            ms(r["time_ns"]),
            r["matmul_flop"],
            ratio(r["tflops_per_s"]),
            ratio(r["mfu"]),
        ]
        for n, r in zip(names, layers.iter_rows(named=True), strict=True)
    ]
    others = layers.height - TOP_ROWS
    return chart(
        "rates",
        "Achieved TFLOP/s and MFU per layer",
        f"{f.source_note}; numbered modules collapsed to *"
        + (
            f"; drawn: the {TOP_ROWS} layers with the most time, the other "
            f"{others} as one bar (the table has them all)."
            if layers.height > drawn.height
            else "."
        ),
        heading="TFLOP/s per layer",
        data=data,
        rows=table(
            RATES_COLUMNS,
            rows,
        ),
        xaxis=category_axis("layer"),
        yaxis={"title": "achieved TFLOP/s"},
        **extra,
    )


def top_layers(layers: pl.DataFrame, n: int = TOP_ROWS) -> pl.DataFrame:
    """The `n` layers with the most time, in their order, and the rest as one row
    `other (N)` (its TFLOP/s from its summed FLOPs and time, its MFU likewise)."""
    if layers.height <= n + 1:
        return layers
    ranked = layers.with_row_index("order").with_columns(
        rank=pl.col("time_ns").rank("ordinal", descending=True)
    )
    top = ranked.filter(pl.col("rank") <= n).sort("order")
    rest = ranked.filter(pl.col("rank") > n)
    scale = (rest["mfu"] / rest["tflops_per_s"]).drop_nulls().drop_nans()
    tflops = to_float(rest["matmul_flop"].sum()) / to_float(rest["time_ns"].sum()) / 1e3
    other = pl.DataFrame(
        {
            "layer": [f"other ({rest.height})"],
            "tflops_per_s": [tflops],
            "mfu": [tflops * scale[0] if len(scale) else None],
        },
        schema={"layer": pl.String, "tflops_per_s": pl.Float64, "mfu": pl.Float64},
    )
    return pl.concat([top.select(other.columns).cast(other.schema), other])
