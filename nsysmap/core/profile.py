"""The frozen result objects that flow between nsysmap's stages."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Self

import polars as pl

from nsysmap.core import schemas


@dataclass(frozen=True)
class Profile:
    """A profile as read, in normalised tables, whatever produced it.

    Built by `nsysmap.read.nsys.nsys_sqlite` (nsys SQLite) or `nsysmap.read.torch.torch_trace`
    (torch.profiler); every frame conforms to its schema in `nsysmap.core.schemas`.
    `ops` are the operations of any device: GPU kernels, copies and memsets, or
    CPU operators when a torch.profiler trace has no device events.
    Its ranges are not nested yet (`depth`, `parent_id` empty, open ranges
    without an end): `nsysmap.attribution.normalise.normalise` makes the
    `NestedProfile` that attribution takes.
    `meta` holds key/value facts: `backend` ("nsys" or "torch.profiler"),
    `nsys_version`, `export_schema_version`, `source_path`, ... when known.
    `graph_links` says which GPU operations ran in or as a CUDA graph (nsys).
    """

    ops: pl.DataFrame
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

    def checked(self) -> Self:
        """This profile (of the same type) with every frame conformed to its declared schema."""
        return replace(
            self,
            ops=schemas.conform(self.ops, schemas.PROFILE_OPS, "ops"),
            api_calls=schemas.conform(self.api_calls, schemas.API_CALLS, "api_calls"),
            ranges=schemas.conform(self.ranges, schemas.RANGES, "ranges"),
            threads=schemas.conform(self.threads, schemas.THREADS, "threads"),
            devices=schemas.conform(self.devices, schemas.DEVICES, "devices"),
            meta=schemas.conform(self.meta, schemas.META, "meta"),
            graph_links=schemas.conform(self.graph_links, schemas.GRAPH_LINKS, "graph_links"),
            compiled=schemas.conform(self.compiled, schemas.COMPILED_KERNELS, "compiled"),
        )


@dataclass(frozen=True)
class NestedProfile(Profile):
    """A Profile ready for attribution: open ranges closed, FSDP spans added, ranges nested.

    Every range has its `depth` and `parent_id` (null for a root). Made by
    `nsysmap.attribution.normalise.normalise`, the only step that nests; the
    attribution (`nsysmap.attribution.attribute.attribute`) takes nothing else,
    so type checking rejects a profile straight from a reader.
    """

    def __post_init__(self) -> None:
        ranges = self.ranges
        if "depth" not in ranges.columns or ranges["depth"].null_count():
            raise TypeError("NestedProfile: ranges without depth; nest them with normalise()")

    def released(self, *, ops: bool = True) -> NestedProfile:
        """This profile without its ranges, API calls and graph links (empty frames of
        their schemas), and without its operations unless `ops`: what the flow keeps
        once the summaries are taken (meta, threads, devices)."""
        return replace(
            self,
            ranges=self.ranges.clear(),
            api_calls=self.api_calls.clear(),
            graph_links=self.graph_links.clear(),
            ops=self.ops if ops else self.ops.clear(),
        )


def meta_frame(items: Mapping[str, object]) -> pl.DataFrame:
    """A META frame from a dict (values as text), leaving out keys whose value is None."""
    kept = {k: v for k, v in items.items() if v is not None}
    return pl.DataFrame(
        {"key": list(kept), "value": [str(v) for v in kept.values()]}, schema=schemas.META
    )
