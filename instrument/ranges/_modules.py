"""The global nn.Module hooks: one forward range per call, one backward range per call.

Forward: the global pre-hook pushes `nsysmap:fwd:<Class>:<path>`, the global
forward hook (`always_call=True`, so it also runs when forward raises) pops it.
Backward: the global full backward pre-hook pushes `nsysmap:bwd:...` when the
gradient reaches the module's outputs, the full backward hook pops it when the
gradients of its inputs are done. Both run on the autograd engine thread that
executes those nodes (the calling thread on CPU), so the range is pushed and
popped there. Each call pushes its own frame and the pop takes the topmost
frame of that module, so a module called twice gets two ranges.

A module none of whose inputs needs grad (an Embedding fed token ids) gets its
full backward hook right after its pre-hook, before its own gradient kernels
run. Its range is then kept open ("awaiting", below) until every parameter of
the module that needs grad has been accumulated (post-accumulate-grad hooks),
so it covers the embedding backward and the weight-gradient accumulation:

    engine thread: [bwd:Embedding:transformer.wte  EmbeddingBackward  AccumulateGrad]
                   ^ pre-hook + (early) full hook      last param hook closes it ^
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from instrument.ranges._names import Names, is_descendant
from instrument.ranges._phases import Phases
from instrument.ranges._state import AWAIT, BWD, FWD, Frame, Stacks, ThreadState, new_frame


class ModuleHooks:
    """Builds the hook functions (closures over the session's state, for speed)."""

    def __init__(self, stacks: Stacks, names: Names, phases: Phases) -> None:
        self.stacks = stacks
        self.names = names
        self.phases = phases
        self._acc_handles: dict[int, Any] = {}
        self.on_named: Any = None  # called with the module after it was named on first call

    # -- forward ----------------------------------------------------------
    def forward_hooks(self) -> tuple[Any, Any]:
        """(pre-hook, hook) for register_module_forward_pre_hook / _forward_hook."""
        get_info = self.names.by_id.get
        local, get_ts, emitter = self.stacks.local, self.stacks.get, self.stacks.emitter
        slow_pre, slow_post = self._forward_pre_slow, self._forward_post_slow

        def forward_pre(module: Any, args: Any) -> None:
            info = get_info(id(module))
            try:
                ts = local.ts
            except AttributeError:
                ts = get_ts()
            if info is None or info.root:
                slow_pre(module, ts, info)
                return
            token = emitter.push(info.fwd) if emitter is not None else None
            ts.stack.append(new_frame(Frame, (FWD, module, token, None, 0, None)))
            ts.fwd_depth += 1

        def forward_post(module: Any, args: Any, output: Any) -> None:
            try:
                ts = local.ts
            except AttributeError:
                return
            stack = ts.stack
            if stack:
                top = stack[-1]
                if top.key is module and top.kind == FWD and top.phase is None:
                    stack.pop()
                    ts.fwd_depth -= 1
                    if emitter is not None:
                        emitter.pop(top.token)
                    return
            slow_post(module, ts, output)

        return forward_pre, forward_post

    def _forward_pre_slow(self, module: Any, ts: ThreadState, info: Any) -> None:
        if info is None:
            if ts.fwd_depth == 0:
                info = self.names.name_root(module)
            else:
                info = self.names.name_nested(module, self._caller_path(ts))
            if self.on_named is not None:
                self.on_named(module)
        phase_frame = self.phases.root_forward_begin(ts) if info.root else None
        self.stacks.push(ts, FWD, module, info.fwd, phase_frame)

    def _forward_post_slow(self, module: Any, ts: ThreadState, output: Any) -> None:
        index = self.stacks.find(ts, (FWD,), module)
        if index < 0:
            return
        phase_frame = ts.stack[index].phase
        self.stacks.pop_to(ts, index)
        if phase_frame is not None:
            # Forward hooks with always_call run inside torch's `except` when forward raised.
            failed = output is None and sys.exc_info()[0] is not None
            self.phases.root_forward_end(ts, phase_frame, failed)

    def _caller_path(self, ts: ThreadState) -> str:
        for frame in reversed(ts.stack):
            if frame.kind == FWD:
                return self.names.path_of(frame.key)
        return ""

    # -- backward ---------------------------------------------------------
    def backward_hooks(self) -> tuple[Any, Any]:
        """(pre-hook, hook) for the global full backward (pre-)hook registration."""
        get_info = self.names.by_id.get
        stacks = self.stacks
        local, get_ts, emitter = stacks.local, stacks.get, stacks.emitter
        find, pop_to = stacks.find, stacks.pop_to
        close_awaits, start_await = self._close_unrelated_awaits, self._start_await

        def backward_pre(module: Any, grad_output: Any) -> None:
            info = get_info(id(module))
            if info is None:
                return
            try:
                ts = local.ts
            except AttributeError:
                ts = get_ts()
            if ts.device is None:
                ts.device = _device_of(grad_output)
            if ts.awaiting:
                close_awaits(ts, info.path)
            token = emitter.push(info.bwd) if emitter is not None else None
            ts.stack.append(new_frame(Frame, (BWD, module, token, None, stacks.epoch, None)))

        def backward_post(module: Any, grad_input: Any, grad_output: Any) -> None:
            try:
                ts = local.ts
            except AttributeError:
                return
            stack = ts.stack
            last = len(stack) - 1
            if last >= 0 and stack[last].key is module and stack[last].kind == BWD:
                index = last
            else:
                index = find(ts, (BWD,), module)
                if index < 0:
                    return
            if index == last and _all_none(grad_input):
                start_await(ts, module)
            else:
                pop_to(ts, index)

        return backward_pre, backward_post

    def _start_await(self, ts: ThreadState, module: Any) -> None:
        """Keep the top backward frame open until the module's parameters are accumulated."""
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            self.stacks.pop_to(ts, len(ts.stack) - 1)
            return
        for param in params:
            if id(param) not in self._acc_handles:
                handle = param.register_post_accumulate_grad_hook(self._accumulated)
                self._acc_handles[id(param)] = handle
        ts.stack[-1] = ts.stack[-1]._replace(kind=AWAIT, pending={id(p) for p in params})
        ts.awaiting += 1

    def _accumulated(self, param: torch.Tensor) -> None:
        """Post-accumulate-grad hook: close awaiting frames whose parameters are all done."""
        ts = self.stacks.get()
        if not ts.awaiting:
            return
        key = id(param)
        stack = ts.stack
        for frame in stack:
            if frame.kind == AWAIT and frame.pending is not None:
                frame.pending.discard(key)
        index = len(stack)
        while index and stack[index - 1].kind == AWAIT and not stack[index - 1].pending:
            index -= 1
        self.stacks.pop_to(ts, index)

    def _close_unrelated_awaits(self, ts: ThreadState, path: str) -> None:
        """A new backward range begins: close awaiting frames it does not nest in."""
        stack, path_of = ts.stack, self.names.path_of
        index = len(stack)
        while index and stack[index - 1].kind == AWAIT:
            if is_descendant(path, path_of(stack[index - 1].key)):
                break
            index -= 1
        self.stacks.pop_to(ts, index)

    def remove_accumulate_hooks(self) -> None:
        """Remove the post-accumulate-grad hooks put on parameters."""
        for handle in self._acc_handles.values():
            handle.remove()
        self._acc_handles.clear()


def _all_none(grads: Any) -> bool:
    """True when no input gradient exists (the hook fired from the output side)."""
    if not grads or grads[0] is not None:
        return not grads
    return all(g is None for g in grads)


def _device_of(grads: Any) -> torch.device | None:
    for g in grads:
        if isinstance(g, torch.Tensor):
            return g.device
    return None
