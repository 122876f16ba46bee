"""Shared helpers for the instrument tests (no tests here): a recording emitter.

The recorder checks the emitter contract on every pop: the token popped is
the top of the popping thread's own stack (same thread, LIFO). `ranges()`
turns the event log into closed ranges with their parent on that thread.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

import pytest
import torch

pytestmark = pytest.mark.torch  # imports torch (the training side)


@dataclass
class Range:
    name: str
    thread: int
    begin: int  # position in the event log
    end: int
    parent: str | None  # enclosing range on the same thread

    def contains(self, position: int) -> bool:
        return self.begin < position < self.end


class Recorder:
    """An Emitter that logs pushes, pops and test marks in one ordered list."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self._ids = itertools.count()
        self._stacks: dict[int, list[tuple]] = {}
        self.violations: list[str] = []

    def prepare(self, name: str) -> str:
        return name

    def push(self, name: str) -> tuple:
        thread = threading.get_ident()
        token = (next(self._ids), name, thread)
        self._stacks.setdefault(thread, []).append(token)
        self.events.append(("push", token))
        return token

    def pop(self, token: tuple) -> None:
        thread = threading.get_ident()
        stack = self._stacks.get(thread, [])
        if not stack or stack[-1] is not token:
            self.violations.append(f"pop of {token[1]} on thread {thread} is not LIFO")
        else:
            stack.pop()
        self.events.append(("pop", token))

    def mark(self, label: str) -> None:
        """Record a point in time (from test code, e.g. inside a backward)."""
        self.events.append(("mark", label, threading.get_ident()))

    def open_ranges(self) -> list[str]:
        return [token[1] for stack in self._stacks.values() for token in stack]

    def ranges(self) -> list[Range]:
        begin: dict[int, tuple[int, str | None]] = {}
        open_by_thread: dict[int, list[str]] = {}
        out = []
        for i, event in enumerate(self.events):
            if event[0] == "push":
                _, name, thread = event[1]
                stack = open_by_thread.setdefault(thread, [])
                begin[event[1][0]] = (i, stack[-1] if stack else None)
                stack.append(name)
            elif event[0] == "pop":
                ident, name, thread = event[1]
                open_by_thread[thread].pop()
                start, parent = begin.pop(ident)
                out.append(Range(name, thread, start, i, parent))
        return sorted(out, key=lambda r: r.begin)

    def marks(self, label: str) -> list[int]:
        return [i for i, e in enumerate(self.events) if e[0] == "mark" and e[1] == label]

    def names(self) -> list[str]:
        return [r.name for r in self.ranges()]


class FailBackward(torch.autograd.Function):
    """Identity forward; its backward raises, to test exception safety."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("backward failed")
