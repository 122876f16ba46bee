"""A named number a rule compares with, and the one every rule shares (above nsysmap.core only)."""

from __future__ import annotations

from dataclasses import dataclass

from nsysmap.core.wait_schemas import LAUNCH_OVERHEAD_NS


@dataclass(frozen=True)
class Threshold:
    """A named number a rule compares with, documented in docs/findings.md."""

    name: str
    value: float
    meaning: str


# Launch gaps up to this long are launch overhead (the launch_bound and optimizer rules
# claim them); longer ones are other host work between kernels. Shared by every rule.
LAUNCH_GAP = Threshold(
    "max_launch_gap_ns",
    LAUNCH_OVERHEAD_NS,
    "a launch gap up to this long is launch overhead; a longer one is other host work",
)
