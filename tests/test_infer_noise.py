"""Inference through the noise of real kernel streams, on planted sequences with a known truth.

Each pass is a prefix, L blocks of one kernel motif and a suffix; GEMM
kernels change their tile (template arguments) from block to block, a second
stream's copies are interleaved at random, and kernels are inserted and
dropped at random at known rates. Inference must find L blocks, the passes,
no backward pass, and the true block of at least 90 % of the block kernels:
always without insertions and drops, for most models with them.
"""

from __future__ import annotations

import random

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsysmap.infer.summary import infer_ops

pytestmark = pytest.mark.slow  # a hundred planted models: seconds, in `make test`

_POOL = [
    ("elementwise", "vectorized_elementwise_kernel"),
    ("elementwise", "elementwise_kernel"),
    ("reduction", "reduce_kernel"),
    ("normalization", "layer_norm_kernel"),
    ("softmax", "softmax_warp_forward"),
    ("gemm", "gemm"),
    ("elementwise", "index_elementwise_kernel"),
    ("elementwise", "unrolled_elementwise_kernel"),
    ("elementwise", "elementwise_kernel_with_index"),
    ("reduction", "reduce_max_kernel"),
    ("elementwise", "cat_array_batched_copy"),
]


def _kernel(rnd: random.Random, category: str, short: str) -> tuple[str, str, str]:
    """(category, short name, full name); GEMMs draw a tile, as per-shape kernels do."""
    if category == "gemm":
        tile = rnd.choice(["128x128", "128x64", "64x64_sliced1x4"])
        short = f"ampere_sgemm_{tile}_{rnd.choice(['tn', 'nn'])}"
    return category, short, f"void {short}<float, {rnd.randrange(1, 9)}>(Params)"


def _planted(seed: int, passes: int, layers: int, motif: int, rate: float) -> pl.DataFrame:
    rnd = random.Random(seed)
    block = [rnd.choice(_POOL) for _ in range(motif - 2)] + [_POOL[3], _POOL[5]]
    rows, t = [], 0
    for p in range(passes):
        plan = [("embedding", None)] * 3 + [(b, layer) for layer in range(layers) for b in block]
        plan += [("head", None)] * 4
        t += 5_000_000  # host work between passes
        for i, (what, layer) in enumerate(plan):
            if rnd.random() < rate:  # a dropped kernel
                continue
            if rnd.random() < rate:  # an inserted one (a fill, a copy_)
                rows.append((t, "elementwise", "fill_kernel", "void fill_kernel<int>()", 7, None))
                t += 1_000
            if isinstance(what, tuple):
                kernel = _kernel(rnd, *what)
            else:
                kernel = ("elementwise", f"{what}_kernel_{i % 3}", f"{what}_kernel_{i % 3}")
            rows.append((t, *kernel, 7, layer))
            t += 1_000
            if rnd.random() < 0.05:  # the other stream
                rows.append((t, "memcpy", "[CUDA memcpy DtoD]", "[CUDA memcpy DtoD]", 8, None))
                t += 1_000
        del p
    return _ops(rows)


def _ops(rows: list[tuple]) -> pl.DataFrame:
    start, category, short, name, stream, layer = zip(*rows, strict=True)
    n = len(rows)
    kind = ["memcpy" if c == "memcpy" else "kernel" for c in category]
    return pl.DataFrame(
        {
            "op_id": range(n),
            "device_id": [0] * n,
            "pid": [1] * n,
            "tid": [1] * n,
            "stream_id": list(stream),
            "kind": kind,
            "category": list(category),
            "name": list(name),
            "short_name": list(short),
            "start_ns": [s + 10_000 for s in start],
            "end_ns": [s + 10_500 for s in start],
            "launch_start_ns": list(start),
            "dur_ns": [500] * n,
            "step": [None] * n,
            "phase": [None] * n,
            "module": [None] * n,
            "layer": list(layer),
        },
        schema_overrides={"step": pl.Int64, "phase": pl.String, "module": pl.String},
    )


def _check(ops: pl.DataFrame, passes: int, layers: int) -> None:
    inferred = infer_ops(ops)
    (found,) = inferred.found
    joined = ops.join(inferred.labels, on=["op_id", "device_id"])
    assert found.steps == passes
    assert not found.backward
    assert joined.filter(pl.col("inferred_phase") == "backward").is_empty()
    assert joined["inferred_block"].drop_nulls().n_unique() == layers
    in_layer = joined.filter(pl.col("layer").is_not_null())
    agree = in_layer.filter(pl.col("layer") == pl.col("inferred_block")).height
    assert agree >= 0.9 * in_layer.height
    # Nothing of the prefix and suffix is taken for a block.
    outside = joined.filter(pl.col("short_name").str.contains("embedding|head"))
    assert outside["inferred_block"].null_count() >= outside.height - 2 * passes
    # ... and they are labelled prefix and suffix (next to noise, up to two kernels per
    # pass may drift into a block).
    labelled = outside.filter(pl.col("inferred_region").is_in(["prefix", "suffix"]))
    assert labelled.height >= outside.height - 2 * passes


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    passes=st.integers(1, 4),
    layers=st.integers(3, 16),
    motif=st.integers(12, 40),
)
def test_blocks_and_passes_are_found_through_template_variation_and_a_second_stream(
    seed, passes, layers, motif
):
    _check(_planted(seed, passes, layers, motif, 0.0), passes, layers)


@pytest.mark.parametrize(("rate", "least"), [(0.002, 0.75), (0.005, 0.5)])
def test_most_planted_models_are_found_through_inserted_and_dropped_kernels(rate, least):
    """Kernels inserted and dropped at random, each at `rate`: the share of random
    models (4-16 layers of 16-40 kernels, 1-4 passes) inferred right in every respect
    of `_check`. Measured on 100 models: 84 % at 0.2 %, 62 % at 0.5 %, 34 % at 1 %
    (docs/inference.md)."""
    rnd = random.Random(7)
    cases = [
        (rnd.randrange(10**4), rnd.randint(1, 4), rnd.randint(4, 16), rnd.randint(16, 40))
        for _ in range(40)
    ]
    right = 0
    for seed, passes, layers, motif in cases:
        try:
            _check(_planted(seed, passes, layers, motif, rate), passes, layers)
        except AssertionError:
            continue
        right += 1
    assert right >= least * len(cases)
