"""Compiled kernels replayed from a CUDA graph (`torch.compile(mode="reduce-overhead")`).

A replay has no CPU-side event per kernel: one `cudaGraphLaunch` inside the
graph call runs them all. They are matched to the call sites of the graph in
the order they ran: a kernel named like a site (a Triton kernel) takes the
n-th site of its name; the other kernels (cuBLAS, cuDNN: an extern call may
run several) between two named sites take the extern site between them when
there is one, or the extern sites in turn when there are as many as kernels.

    sites     0 triton_a   1 aten::mm        2 triton_b   3 aten::mm  4 aten::addmm
    replay      triton_a   gemm  splitK      triton_b     gemm        gemm
    site        0          1     1           2            3           4
"""

from __future__ import annotations

import polars as pl

UNIT = ["rel_module", "rel_class", "rel_modules"]
EXTERN = "aten::"  # extern kernel sites are named by their operator


def replayed(ops: pl.DataFrame, found: pl.DataFrame, sites: pl.DataFrame) -> pl.DataFrame:
    """`_row` and UNIT columns of the GPU kernels of calls that matched no CPU-side event."""
    hits = found.group_by("call").agg(pl.col("rel_modules").is_not_null().any().alias("hit"))
    bare = found.join(hits.filter(~pl.col("hit")), on="call", how="semi")
    kernels = ops.filter(pl.col("kind") == "kernel").select("_row", "name", "start_ns")
    rows = (
        bare.select("_row", "call", "graph")
        .join(kernels, on="_row")
        .sort("call", "start_ns")
        .with_columns(occurrence=pl.int_range(pl.len()).over("call", "name"))
        .join(
            sites.select("graph", "kernel", "occurrence", "site"),
            left_on=["graph", "name", "occurrence"],
            right_on=["graph", "kernel", "occurrence"],
            how="left",
        )
        .with_columns(gap=pl.col("site").forward_fill().over("call").fill_null(-1))
    )
    by_site = rows.filter(pl.col("site").is_not_null()).select("_row", "graph", "site")
    matched = pl.concat([by_site, _between(rows.filter(pl.col("site").is_null()), sites)])
    units = sites.select("graph", "site", *UNIT)
    return matched.join(units, on=["graph", "site"]).select("_row", *UNIT)


def _between(others: pl.DataFrame, sites: pl.DataFrame) -> pl.DataFrame:
    """Unnamed kernels to the extern sites in the same gap between named sites."""
    named = pl.when(~pl.col("kernel").str.starts_with(EXTERN)).then(pl.col("site"))
    gaps = (
        sites.sort("graph", "site")
        .with_columns(gap=named.forward_fill().shift(1).over("graph").fill_null(-1))
        .filter(pl.col("kernel").str.starts_with(EXTERN))
        .with_columns(
            j=pl.int_range(pl.len()).over("graph", "gap"), n_sites=pl.len().over("graph", "gap")
        )
        .select("graph", "gap", "site", "j", "n_sites")
    )
    ranked = others.drop("site").with_columns(
        k=pl.int_range(pl.len()).over("call", "gap"), n_kernels=pl.len().over("call", "gap")
    )
    pairs = ranked.join(gaps, on=["graph", "gap"])
    one = pl.col("n_sites") == 1
    in_turn = (pl.col("n_sites") == pl.col("n_kernels")) & (pl.col("j") == pl.col("k"))
    return pairs.filter(one | in_turn).select("_row", "graph", "site")
