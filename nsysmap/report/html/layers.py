"""Charts of time per block and per layer, and of the module (or range) tree (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from nsysmap.report.blocks import block_totals, part_label, part_order
from nsysmap.report.html import tree
from nsysmap.report.html.chart import PHASE_COLOURS, SERIES, Chart, Table, bar, layout, ms, ratio

if TYPE_CHECKING:
    from nsysmap.report.answers import Findings

PART_COLOURS = dict(zip(("attn", "mlp", "ln_1", "ln_2", ""), SERIES, strict=False))


def per_step(f: Findings) -> tuple[int, str]:
    """(divisor, unit) for time: per step when the run has steps."""
    return (f.steps, "ms per step") if f.steps else (1, "ms")


def blocks_phase_chart(f: Findings) -> Chart | None:
    """Each block (`h.0` … `h.11`) as a bar split into forward, backward and other phases."""
    totals = block_totals(f.module_phase)
    if totals.is_empty():
        return None
    steps, unit = per_step(f)
    names = totals["block"].to_list()
    columns = {p: [ms(v / steps) for v in totals[f"{p}_ns"]] for p in ("forward", "backward")}
    columns["other"] = [ms(v / steps) for v in totals["other_ns"]]
    data = [bar(p, names, columns[p], PHASE_COLOURS[p]) for p in ("forward", "backward", "other")]
    rows = [
        [name, c, fw, bw, other, ms(t / steps)]
        for name, c, fw, bw, other, t in zip(
            names,
            totals["block_class"],
            columns["forward"],
            columns["backward"],
            columns["other"],
            totals["time_ns"],
            strict=True,
        )
    ]
    return Chart(
        "blocks_phase",
        "Per block: forward, backward and other phases",
        "Each numbered block with every module below it; devices pooled.",
        {
            "data": data,
            "layout": layout("Time per block by phase", barmode="stack", yaxis={"title": unit}),
        },
        Table(
            ["block", "class", "forward", "backward", "other phases", "total"],
            rows,
            ["text", "text", "ms", "ms", "ms", "ms"],
        ),
    )


def blocks_parts_chart(f: Findings) -> Chart | None:
    """Each block as a bar split into its parts (attention, MLP, norms, its own operations)."""
    if f.blocks.is_empty():
        return None
    steps, unit = per_step(f)
    names = block_totals(f.module_phase)["block"].to_list()
    times = {(r["block"], r["part"]): r["time_ns"] for r in f.blocks.iter_rows(named=True)}
    data, rows = [], []
    for i, part in enumerate(part_order(f.blocks)):
        y = [ms(times.get((b, part), 0) / steps) for b in names]
        colour = PART_COLOURS.get(part, SERIES[i % len(SERIES)])
        data.append(bar(part_label(part), names, y, colour))
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
    return Chart(
        "blocks_parts",
        "Per block: attention, MLP, norms",
        "Parts are each block's direct children with the modules below them; "
        "(own) is the block's own operations.",
        {
            "data": data,
            "layout": layout("Time per block by part", barmode="stack", yaxis={"title": unit}),
        },
        Table(
            [
                "block",
                "part",
                "class",
                "forward",
                "backward",
                "other phases",
                "total",
                "TFLOP/s",
                "MFU",
            ],
            rows,
            ["text", "text", "text", "ms", "ms", "ms", "ms", "number", "share"],
        ),
    )


def tree_chart(f: Findings) -> Chart | None:
    """An icicle of time over the module tree, or the range tree when there are no modules."""
    ops = f.run.ops
    if ops["module"].is_not_null().any():
        root = ops.filter(pl.col("module") == "")["module_class"].drop_nulls()
        nodes = tree.tree(tree.module_paths(ops, root[0] if len(root) else "(model)"), ".", 1)
        what = "module tree"
    elif ops["range_path"].is_not_null().any():
        nodes = tree.tree(tree.range_paths(ops), " > ")
        what = "range tree"
    else:
        return None
    steps, unit = per_step(f)
    inclusive = [ms(v / steps) for v in nodes["inclusive_ns"]]
    trace = {
        "type": "icicle",
        "ids": nodes["id"].to_list(),
        "parents": nodes["parent"].to_list(),
        "labels": nodes["label"].to_list(),
        "values": [ms(v / steps) for v in nodes["own_ns"]],
        "branchvalues": "remainder",
        "customdata": nodes["path"].to_list(),
        "hovertemplate": "%{customdata}<br>%{value:.3f} " + unit + "<extra></extra>",
        "maxdepth": 6,
        "root": {"color": "#f4f4f4"},
    }
    rows = [
        [p or "(all)", ms(o / steps), i]
        for p, o, i in zip(nodes["path"], nodes["own_ns"], inclusive, strict=True)
    ]
    return Chart(
        "tree",
        f"Time over the {what}",
        f"Click a box to zoom into it, the top bar to go back; {unit}, devices pooled.",
        {
            "data": [trace],
            "layout": layout(f"Time over the {what}", margin={"l": 10, "r": 10, "t": 46, "b": 10}),
        },
        Table(["path", "own", "inclusive"], rows, ["text", "ms", "ms"]),
    )


def rates_chart(f: Findings) -> Chart | None:
    """Achieved TFLOP/s (and MFU when the peak is known) per layer with matmul FLOPs."""
    if f.source is None:
        return None
    layers = f.layers.filter(pl.col("matmul_flop") > 0)
    if layers.is_empty():
        return None
    names = [x or "(root)" for x in layers["layer"]]
    tflops = [ratio(v) for v in layers["tflops_per_s"]]
    data = [bar("TFLOP/s", names, tflops, "#1f77b4")]
    extra = {}
    if layers["mfu"].is_not_null().any():
        mfu = [ratio(v) for v in layers["mfu"]]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "MFU",
                "x": names,
                "y": mfu,
                "yaxis": "y2",
                "marker": {"color": "#d62728", "size": 9},
            }
        )
        extra["yaxis2"] = {
            "title": "MFU",
            "overlaying": "y",
            "side": "right",
            "tickformat": ".0%",
            "rangemode": "tozero",
            "showgrid": False,
        }
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
    return Chart(
        "rates",
        "Achieved TFLOP/s and MFU per layer",
        f"{f.source_note}; numbered modules collapsed to *.",
        {"data": data, "layout": layout("TFLOP/s per layer", yaxis={"title": "TFLOP/s"}, **extra)},
        Table(
            ["layer", "class", "modules", "time", "matmul FLOPs", "TFLOP/s", "MFU"],
            rows,
            ["text", "text", "number", "ms", "number", "number", "share"],
        ),
    )
