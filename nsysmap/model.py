"""The frozen result objects that flow between nsysmap's stages."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import polars as pl

from nsysmap import schemas


@dataclass(frozen=True)
class Report:
    """A profile in normalised form, whatever produced it.

    Built by `nsysmap.read.nsys_sqlite` (nsys SQLite) or `nsysmap.read.torch_trace`
    (torch.profiler); every frame conforms to its schema in `nsysmap.schemas`.
    `meta` holds key/value facts: `backend` ("nsys" or "torch.profiler"),
    `nsys_version`, `export_schema_version`, `source_path`, ... when known.
    `graph_links` says which GPU operations ran in or as a CUDA graph (nsys).
    """

    gpu_ops: pl.DataFrame
    api_calls: pl.DataFrame
    ranges: pl.DataFrame
    threads: pl.DataFrame = field(default_factory=lambda: schemas.empty(schemas.THREADS))
    devices: pl.DataFrame = field(default_factory=lambda: schemas.empty(schemas.DEVICES))
    meta: pl.DataFrame = field(default_factory=lambda: schemas.empty(schemas.META))
    graph_links: pl.DataFrame = field(default_factory=lambda: schemas.empty(schemas.GRAPH_LINKS))
    # torch.compile'd kernels and their modules (capture's compiled.json), else empty
    compiled: pl.DataFrame = field(default_factory=lambda: schemas.empty(schemas.COMPILED_KERNELS))

    def meta_value(self, key: str) -> str | None:
        """The metadata value for `key`, or None."""
        hit = self.meta.filter(pl.col("key") == key)
        return None if hit.is_empty() else hit["value"][0]

    def checked(self) -> Report:
        """This report with every frame conformed to its declared schema."""
        return Report(
            gpu_ops=schemas.conform(self.gpu_ops, schemas.GPU_OPS, "gpu_ops"),
            api_calls=schemas.conform(self.api_calls, schemas.API_CALLS, "api_calls"),
            ranges=schemas.conform(self.ranges, schemas.RANGES, "ranges"),
            threads=schemas.conform(self.threads, schemas.THREADS, "threads"),
            devices=schemas.conform(self.devices, schemas.DEVICES, "devices"),
            meta=schemas.conform(self.meta, schemas.META, "meta"),
            graph_links=schemas.conform(self.graph_links, schemas.GRAPH_LINKS, "graph_links"),
            compiled=schemas.conform(self.compiled, schemas.COMPILED_KERNELS, "compiled"),
        )


def meta_frame(items: Mapping[str, object]) -> pl.DataFrame:
    """A META frame from a dict (values as text), leaving out keys whose value is None."""
    kept = {k: v for k, v in items.items() if v is not None}
    return pl.DataFrame(
        {"key": list(kept), "value": [str(v) for v in kept.values()]}, schema=schemas.META
    )
