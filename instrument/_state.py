"""Per-thread stacks of the ranges instrument/ has open, and how they get closed.

Every range is a *frame* `(kind, key, token, extra)` on the stack of the
thread that opened it; the emitter token closes it on that same thread. Frames
close in LIFO order: closing one first closes everything above it, so a frame
left open by an interrupted hook can never outlive its parent:

    main thread:    [step:4 [phase:forward [fwd:GPT2LMHeadModel: [fwd:Conv1D:...]]]]
    engine thread:  [bwd:GPT2Block:transformer.h.1 [bwd:Conv1D:...c_proj]]

Frames still open on an autograd engine thread when the backward call that
made them returns (an exception, a pruned graph) are closed *on that thread*
by running a one-node backward on its device (`close_foreign`).
"""

from __future__ import annotations

import threading
from typing import Any, Final

import torch

from instrument.emitters import Emitter

# Frame fields; Final so that a Frame indexed by one has that field's type.
KIND: Final = 0
KEY: Final = 1
TOKEN: Final = 2
EXTRA: Final = 3
STEP, PHASE, TAIL, FWD, BWD, AWAIT = range(6)
BACKWARD_KINDS = (BWD, AWAIT)

Frame = tuple[int, Any, Any, Any]

_ORIGINAL_BACKWARD = torch.autograd.backward


class ThreadState:
    """The open frames of one thread plus counters the hooks read on the hot path."""

    __slots__ = ("awaiting", "device", "fwd_depth", "ident", "stack")

    def __init__(self, ident: int) -> None:
        self.ident = ident
        self.stack: list[Frame] = []
        self.fwd_depth = 0  # FWD frames on the stack
        self.awaiting = 0  # AWAIT frames on the stack
        self.device: torch.device | None = None  # device of the backward work seen here


class Stacks:
    """Registry of per-thread stacks plus the emitter that opens and closes ranges."""

    def __init__(self, emitter: Emitter | None) -> None:
        self.emitter = emitter
        self.local = threading.local()
        self.threads: dict[int, ThreadState] = {}
        self._payloads: dict[str, Any] = {}
        self.epoch = 0  # bumped by every wrapped backward call

    def get(self) -> ThreadState:
        """This thread's state, created on first use."""
        try:
            return self.local.ts
        except AttributeError:
            ident = threading.get_ident()
            ts = self.local.ts = ThreadState(ident)
            self.threads[ident] = ts
            return ts

    def payload(self, name: str) -> Any:
        """The emitter's prepared form of `name` (None when silent), cached."""
        if self.emitter is None:
            return None
        payload = self._payloads.get(name)
        if payload is None:
            payload = self._payloads[name] = self.emitter.prepare(name)
        return payload

    def push(self, ts: ThreadState, kind: int, key: Any, payload: Any, extra: Any = None) -> int:
        """Open a range on this thread; returns its stack index."""
        token = self.emitter.push(payload) if self.emitter is not None else None
        ts.stack.append((kind, key, token, extra))
        if kind == FWD:
            ts.fwd_depth += 1
        return len(ts.stack) - 1

    def pop_to(self, ts: ThreadState, index: int) -> None:
        """Close frames from the top until only `index` frames remain."""
        stack, emitter = ts.stack, self.emitter
        while len(stack) > index:
            kind, _, token, _ = stack.pop()
            if kind == FWD:
                ts.fwd_depth -= 1
            elif kind == AWAIT:
                ts.awaiting -= 1
            if emitter is not None:
                emitter.pop(token)

    @staticmethod
    def find(ts: ThreadState, kinds: tuple[int, ...], key: Any) -> int:
        """Index of the topmost frame of one of `kinds` whose key is `key`, else -1."""
        stack = ts.stack
        for i in range(len(stack) - 1, -1, -1):
            frame = stack[i]
            if frame[KEY] is key and frame[KIND] in kinds:
                return i
        return -1

    def close_backward_frames(self, ts: ThreadState, since_epoch: int) -> None:
        """Close the lowest backward frame of epoch >= since_epoch and all above it."""
        for index, frame in enumerate(ts.stack):
            if frame[KIND] in BACKWARD_KINDS and _frame_epoch(frame) >= since_epoch:
                self.pop_to(ts, index)
                return

    def close_foreign(self, since_epoch: int) -> None:
        """Close backward frames that other threads left open (see module docstring).

        On CPU the engine runs backward on the calling thread, so this only
        finds work on accelerator engine threads. Frames on a thread with no
        known accelerator device cannot be reached and are forgotten.
        """
        here = threading.get_ident()
        for ts in list(self.threads.values()):
            if ts.ident == here or not _has_backward_frames(ts, since_epoch):
                continue
            if ts.device is None or ts.device.type == "cpu":
                ts.stack.clear()
                ts.fwd_depth = ts.awaiting = 0
                continue
            _run_on_engine_thread(
                ts.device, lambda: self.close_backward_frames(self.get(), since_epoch)
            )

    def forget_threads(self) -> None:
        """Drop every thread's state (after everything was closed)."""
        self.threads.clear()
        self.local = threading.local()


def _frame_epoch(frame: Frame) -> int:
    extra = frame[EXTRA]
    return extra[0] if frame[KIND] == AWAIT else extra


def _has_backward_frames(ts: ThreadState, since_epoch: int) -> bool:
    return any(f[KIND] in BACKWARD_KINDS and _frame_epoch(f) >= since_epoch for f in ts.stack)


class _RunInBackward(torch.autograd.Function):
    """Identity whose backward calls a function on the engine thread of its device."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, fn: Any) -> torch.Tensor:
        ctx.fn = fn
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        ctx.fn()
        return grad, None


def _run_on_engine_thread(device: torch.device, fn: Any) -> None:
    """Call `fn` on the autograd engine thread that serves `device`."""
    with torch.enable_grad():
        x = torch.zeros((), device=device, requires_grad=True)
        _ORIGINAL_BACKWARD(_RunInBackward.apply(x, fn))
