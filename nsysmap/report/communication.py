"""TEMPORARY stub until the comm branch lands."""

from __future__ import annotations

from typing import Any

import polars as pl


def communication_answer(ops: pl.DataFrame) -> dict[str, Any]:
    return {"id": "communication", "unknown": "stub", "collectives": []}


def communication_section(answer: dict[str, Any]) -> list[str]:
    return []
