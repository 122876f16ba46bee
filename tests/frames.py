"""Build profiles inline, with whole-millisecond timings: `Frames.profile()` is a NestedProfile."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from nsysmap.attribution.normalise import normalise
from nsysmap.core import schemas
from nsysmap.core.profile import NestedProfile, Profile, meta_frame

MS = 1_000_000


@dataclass
class Frames:
    """Collects rows; `profile()` returns them read and normalised (a NestedProfile)."""

    ranges: list[dict] = field(default_factory=list)
    calls: list[dict] = field(default_factory=list)
    ops: list[dict] = field(default_factory=list)

    def range(
        self, tid: int, name: str, start: int, end: int, *, pid: int = 1, kind: str = "push_pop"
    ) -> int:
        rid = len(self.ranges)
        self.ranges.append(
            dict(
                range_id=rid,
                pid=pid,
                tid=tid,
                domain=None,
                name=name,
                start_ns=start * MS,
                end_ns=end * MS,
                kind=kind,
                depth=None,
                parent_id=None,
            )
        )
        return rid

    def kernel(
        self,
        tid: int | None,
        launch_at: int,
        name: str = "kernel",
        *,
        pid: int = 1,
        device: int = 0,
        dur: int = 1,
        run_at: int | None = None,
        kind: str = "kernel",
    ) -> int:
        """A GPU op launched at `launch_at` from thread `tid` (None: no launch row)."""
        op_id = len(self.ops)
        corr = 1000 + op_id
        if tid is not None:
            self.calls.append(
                dict(
                    pid=pid,
                    tid=tid,
                    correlation_id=corr,
                    api_name="cudaLaunchKernel_v7000",
                    start_ns=launch_at * MS,
                    end_ns=launch_at * MS + 1000,
                )
            )
        start = (run_at if run_at is not None else launch_at + 1) * MS
        self.ops.append(
            dict(
                op_id=op_id,
                kind=kind,
                device_id=device,
                stream_id=7,
                pid=pid,
                correlation_id=corr,
                start_ns=start,
                end_ns=start + dur * MS,
                dur_ns=dur * MS,
                name=name,
                short_name=name,
                grid_x=1,
                grid_y=1,
                grid_z=1,
                block_x=128,
                block_y=1,
                block_z=1,
                bytes=None,
                input_shapes=None,
            )
        )
        return op_id

    def profile(self) -> NestedProfile:
        raw = Profile(
            ops=pl.DataFrame(self.ops, schema=schemas.PROFILE_OPS),
            api_calls=pl.DataFrame(self.calls, schema=schemas.API_CALLS),
            ranges=pl.DataFrame(self.ranges, schema=schemas.RANGES),
            meta=meta_frame({"backend": "test"}),
        )
        return normalise(raw)
