"""Scoped attribute patches, undone exactly (same object back, or the attribute removed)."""

from __future__ import annotations

from typing import Any

_MISSING = object()


class Patches:
    """Records every attribute it replaces so `undo` restores the previous state."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any]] = []

    def replace(self, owner: Any, name: str, make: Any) -> None:
        """Set `owner.name = make(current)`, remembering what was there.

        Only the owner's own attribute is recorded (`vars(owner)`), so a
        method a class inherits is restored by deleting the override.
        """
        own = vars(owner).get(name, _MISSING)
        setattr(owner, name, make(getattr(owner, name)))
        self._undo.append((owner, name, own))

    def undo(self) -> None:
        """Restore every patched attribute, newest first."""
        while self._undo:
            owner, name, own = self._undo.pop()
            if own is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, own)
