"""Intervals on threads: nesting, crossing repair and innermost lookups (pure, Polars).

A leaf package: the readers (torch.profiler module ranges) and attribution
both nest intervals with it; it imports nothing of the flow.
"""
