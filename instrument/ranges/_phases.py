"""Steps and phases: the state machine that the wrappers and hooks drive.

A step opens lazily, on the thread where the first phase of an iteration
begins (data, zero_grad, forward, backward or optimizer), and ends:

* training step: when the *step optimizer* finishes `step()` (the optimizer
  given to `annotate`, else the first optimizer seen stepping);
* forward-only step: when the primary root's forward ends with grad disabled
  and the step has seen no grad-enabled forward, backward or optimizer step.

Two phases are open-ended *tails*: `data` stays open after the loader's
`__next__` returns (so the batch's copy to the device counts as data), and
`loss` opens when a grad-enabled root forward ends (the loss computed after
the model). A tail closes when the next phase begins or the step ends:

    step:3 [data~~~~~][zero_grad][forward][loss~~~][backward][optimizer]
            __next__ .to(dev)              F.cross_entropy
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import Any

import torch

from instrument.phase_vocabulary import BACKWARD, DATA, FORWARD, LOSS, OPTIMIZER
from instrument.ranges._state import PHASE, STEP, TAIL, Frame, Stacks, ThreadState
from instrument.ranges.naming import phase_range, step_range

StepListener = Callable[[int], None]


class Phases:
    """Step and phase ranges of the threads that drive training."""

    def __init__(self, stacks: Stacks) -> None:
        self.stacks = stacks
        self.next_step = 0  # index the next step range gets
        self.steps_completed = 0  # steps ended by the step rule
        self.step_ts: ThreadState | None = None  # thread holding the open step
        self.step_trains = False
        self.step_optimizer: weakref.ref | None = None
        self.on_step_start: list[StepListener] = []
        self.on_step_end: list[StepListener] = []
        self.on_phase_begin: Callable[[], None] | None = None  # after any step listeners
        self._optimizer_frames: dict[int, list[tuple[ThreadState, Frame]]] = {}

    # -- phases -------------------------------------------------------------
    def begin(self, phase: str) -> tuple[ThreadState, Frame]:
        """Open `phase` on this thread (closing tails, opening a step if needed)."""
        ts = self.stacks.get()
        self._close_tails(ts)
        if self.step_ts is None:
            self._open_step(ts)
        if self.on_phase_begin is not None:
            self.on_phase_begin()
        self.stacks.push(ts, PHASE, phase, self.stacks.payload(phase_range(phase)))
        return ts, ts.stack[-1]

    def end(self, ts: ThreadState, frame: Frame) -> None:
        """Close `frame` and anything still open above it; no-op when already closed."""
        stack = ts.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is frame:
                self.stacks.pop_to(ts, i)
                return

    def to_tail(self, ts: ThreadState, frame: Frame) -> None:
        """Leave a phase open past its scope until the next phase (see module doc)."""
        if ts.stack and ts.stack[-1] is frame:
            ts.stack[-1] = frame._replace(kind=TAIL)

    @staticmethod
    def current(ts: ThreadState) -> str | None:
        """The innermost open phase on this thread."""
        for frame in reversed(ts.stack):
            if frame.kind in (PHASE, TAIL):
                return frame.key
        return None

    def _close_tails(self, ts: ThreadState) -> None:
        stack = ts.stack
        index = len(stack)
        while index and stack[index - 1].kind == TAIL:
            index -= 1
        self.stacks.pop_to(ts, index)

    # -- steps --------------------------------------------------------------
    def _open_step(self, ts: ThreadState) -> None:
        index = self.next_step
        for listener in self.on_step_start:
            listener(index)
        self.stacks.push(ts, STEP, index, self.stacks.payload(step_range(index)))
        self.step_ts = ts
        self.step_trains = False

    def end_step(self) -> None:
        """Close the open step (and everything above it); only from its own thread."""
        ts = self.step_ts
        if ts is None or ts is not self.stacks.get():
            return
        self.step_ts = None
        for i in range(len(ts.stack) - 1, -1, -1):
            if ts.stack[i].kind == STEP:
                self.stacks.pop_to(ts, i)
                break
        self.next_step += 1
        self.steps_completed += 1
        for listener in self.on_step_end:
            listener(self.next_step - 1)

    def close_all(self) -> None:
        """Close every frame on this thread; an open step is left incomplete."""
        ts = self.stacks.get()
        self.stacks.pop_to(ts, 0)
        if self.step_ts is not None:
            self.step_ts = None
            self.next_step += 1

    # -- the primary root's forward -----------------------------------------
    def root_forward_begin(self, ts: ThreadState) -> Frame | None:
        """Open the forward phase for a root forward (None when already inside one)."""
        if self.current(ts) == FORWARD:
            return None
        return self.begin(FORWARD)[1]

    def root_forward_end(self, ts: ThreadState, frame: Frame, failed: bool) -> None:
        """Close the forward phase, then open the loss tail or end a forward-only step."""
        self.end(ts, frame)
        if failed:
            return
        if torch.is_grad_enabled():
            self.step_trains = True
            self.to_tail(*self.begin(LOSS))
        elif self.step_ts is ts and not self.step_trains:
            self.end_step()

    # -- optimizer step hooks (torch.optim global hooks) ---------------------
    def optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Global optimizer step pre-hook: open the optimizer phase."""
        if torch.compiler.is_compiling():
            return
        if self.step_optimizer is None or self.step_optimizer() is None:
            self.step_optimizer = weakref.ref(optimizer)
        frames = self._optimizer_frames.setdefault(id(optimizer), [])
        frames.append(self.begin(OPTIMIZER))
        self.step_trains = True

    def optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Global optimizer step post-hook: close the phase; the step optimizer ends the step."""
        if torch.compiler.is_compiling():
            return
        frames = self._optimizer_frames.get(id(optimizer))
        if frames:
            self.end(*frames.pop())
        if self.step_optimizer is not None and self.step_optimizer() is optimizer:
            self.end_step()

    # -- scoped wrappers ------------------------------------------------------
    def scoped(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` wrapped in the phase `phase` (zero_grad); plain `fn` while Dynamo traces it."""
        is_compiling = torch.compiler.is_compiling

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if is_compiling():
                return fn(*args, **kwargs)
            ts, frame = self.begin(phase)
            try:
                return fn(*args, **kwargs)
            finally:
                self.end(ts, frame)

        return _like(wrapper, fn)

    def data_next(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """A DataLoader iterator `__next__` that opens the data tail."""
        is_compiling = torch.compiler.is_compiling

        def __next__(iterator: Any) -> Any:
            if is_compiling():
                return fn(iterator)
            ts, frame = self.begin(DATA)
            try:
                batch = fn(iterator)
            except BaseException:
                self.end(ts, frame)
                raise
            self.to_tail(ts, frame)
            return batch

        return _like(__next__, fn)

    def loss_fn(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """A loss function that shows as a (possibly nested) loss phase inside a step.

        While Dynamo traces it (a loss computed inside a compiled forward), it is
        the plain loss function: `is_compiling()` comes first, so no state of
        the session is read and nothing is guarded on.
        """
        is_compiling = torch.compiler.is_compiling

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if is_compiling() or self.step_ts is None:
                return fn(*args, **kwargs)
            ts = self.stacks.get()
            if self.current(ts) == LOSS:
                return fn(*args, **kwargs)
            ts, frame = self.begin(LOSS)
            try:
                return fn(*args, **kwargs)
            finally:
                self.end(ts, frame)

        return _like(wrapper, fn)

    def backward_call(self, fn: Callable[..., Any], phase: bool) -> Callable[..., Any]:
        """torch.autograd.backward (phase=True) or .grad (False), cleaning up after itself.

        Backward ranges still open when the call returns (an exception, a
        graph pruned by `inputs=`) are closed on the thread that opened them.
        """
        stacks = self.stacks
        is_compiling = torch.compiler.is_compiling

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if is_compiling():
                return fn(*args, **kwargs)
            ts = stacks.get()
            if phase and self.current(ts) != BACKWARD:
                self.begin(BACKWARD)
                depth = len(ts.stack) - 1
            else:
                depth = len(ts.stack)
            stacks.epoch += 1
            since = stacks.epoch
            try:
                return fn(*args, **kwargs)
            finally:
                stacks.pop_to(ts, depth)
                stacks.close_foreign(since)
                self.step_trains = self.step_trains or phase

        return _like(wrapper, fn)


def _like(wrapper: Callable[..., Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    """Copy name, docstring and signature metadata of `fn` onto `wrapper`."""
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        with contextlib.suppress(AttributeError):
            setattr(wrapper, attr, getattr(fn, attr))
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper
