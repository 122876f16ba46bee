"""Kernel names shortened in the middle, never two alike."""

from __future__ import annotations

ELLIPSIS = "…"


def middle(text: str, width: int) -> str:
    """`text` cut to `width` characters by dropping its middle (head … tail)."""
    if len(text) <= width:
        return text
    keep = max(width - 1, 2)
    head = (keep + 1) // 2
    return text[:head] + ELLIPSIS + text[len(text) - (keep - head) :]


def distinct_labels(names: list[str], width: int = 60) -> list[str]:
    """Each name shortened in the middle; names that would look alike are widened until not.

    Equal names keep equal labels; different names always get different labels
    (in the worst case their full text).
    """
    widths = dict.fromkeys(names, width)
    while True:
        labels = {name: middle(name, widths[name]) for name in widths}
        owners: dict[str, list[str]] = {}
        for name, label in labels.items():
            owners.setdefault(label, []).append(name)
        clashes = [n for group in owners.values() if len(group) > 1 for n in group]
        if not clashes:
            return [labels[name] for name in names]
        for name in clashes:
            widths[name] = len(name) if widths[name] >= len(name) else widths[name] + 8
