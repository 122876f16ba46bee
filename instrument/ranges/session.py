"""Installing and removing the instrumentation: `annotate`, `install`, `uninstall`.

One session is active at a time. `install` while one is active only adds the
model/optimizer it was given and counts a reference (so nesting `annotate`
never doubles a range); the last `uninstall` closes every range still open
(on this thread, and on autograd engine threads), removes every hook and
undoes every patch.
"""

from __future__ import annotations

import contextlib
import re
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.modules import module as nn_module
from torch.optim import optimizer as optim_module
from torch.utils.data import dataloader

from instrument.phase_vocabulary import ZERO_GRAD
from instrument.ranges._compile import CompileWatch, Suspender, wrapper_hooks
from instrument.ranges._modules import ModuleHooks
from instrument.ranges._names import Names
from instrument.ranges._patch import Patches
from instrument.ranges._phases import Phases
from instrument.ranges._state import Stacks
from instrument.ranges.emitters import Emitter, make_emitter

LOSS_FUNCTIONS = (
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "cosine_embedding_loss",
    "cross_entropy",
    "ctc_loss",
    "gaussian_nll_loss",
    "hinge_embedding_loss",
    "huber_loss",
    "kl_div",
    "l1_loss",
    "margin_ranking_loss",
    "mse_loss",
    "multi_margin_loss",
    "multilabel_margin_loss",
    "multilabel_soft_margin_loss",
    "nll_loss",
    "poisson_nll_loss",
    "smooth_l1_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
    "triplet_margin_with_distance_loss",
)
# Warnings torch gives for modules whose backward ranges instrument/ handles itself.
_QUIET = (
    "For backward hooks to be called, module output should be a Tensor",
    "Full backward hook is firing when gradients are computed with respect to module outputs",
    # nsysmap names torch.compile's wrapper like the model and keeps its hooks off inside it.
    "Using `torch.compile(module)` when there are global hooks on modules",
)


class Session:
    """Everything one installation put in place, and the state its hooks share."""

    def __init__(self, emit: str | Emitter) -> None:
        self.stacks = Stacks(make_emitter(emit))
        self.names = Names(self.stacks)
        self.phases = Phases(self.stacks)
        self.modules = ModuleHooks(self.stacks, self.names, self.phases)
        self._forward = self.modules.forward_hooks()
        self._handles: list[Any] = []
        self._module_handles: list[Any] = []
        self._mode: tuple[str | None, Any] = (None, None)
        self.modules.on_named = self._named
        self._warned_inplace = False
        self._patches = Patches()
        self._filters: list[Any] = []
        self.suspender = Suspender(self._suspended)
        self.compile_watch = CompileWatch(self.suspender)
        self._wrapper_handles: list[Any] = []
        self.on_primary: list[Callable[[torch.nn.Module], None]] = []  # the primary root, once
        self._told_primary: weakref.ref | None = None

    @property
    def emitting(self) -> bool:
        """False when nothing can listen (emit="off", or no NVTX tool for "nvtx")."""
        return self.stacks.emitter is not None

    @property
    def steps_completed(self) -> int:
        """Steps ended by the step rule so far."""
        return self.phases.steps_completed

    def add_step_listener(
        self,
        on_start: Callable[[int], None] | None = None,
        on_end: Callable[[int], None] | None = None,
    ) -> None:
        """Call `on_start(k)` before step k's range opens and `on_end(k)` after it closes."""
        if on_start is not None:
            self.phases.on_step_start.append(on_start)
        if on_end is not None:
            self.phases.on_step_end.append(on_end)

    def adopt(self, model: torch.nn.Module | None, optimizer: Any | None) -> None:
        """Name `model` as a root (the primary one if first) and `optimizer` the step optimizer."""
        if model is not None and id(model) not in self.names.by_id:
            self.names.name_root(model)
        if optimizer is not None and self.phases.step_optimizer is None:
            self.phases.step_optimizer = weakref.ref(optimizer)
        if self._mode[0] is not None:
            self._named()

    def install(self) -> None:
        """Register the optimizer hooks, apply the scoped patches, attach module hooks."""
        self._handles += [
            optim_module.register_optimizer_step_pre_hook(self.phases.optimizer_pre),
            optim_module.register_optimizer_step_post_hook(self.phases.optimizer_post),
        ]
        if self.emitting:
            for message in _QUIET:
                warnings.filterwarnings("ignore", message=re.escape(message), category=UserWarning)
                self._filters.append(warnings.filters[0])
        self._patch()
        self.phases.on_phase_begin = self.refresh_module_hooks
        self.refresh_module_hooks()

    def refresh_module_hooks(self) -> None:
        """Per-module hooks while someone listens; otherwise only the primary root's.

        Runs at install and whenever a phase begins (after the step listeners,
        so a profiler started by a listener is seen). While nothing listens only
        the root forward is hooked (it drives the forward phase and
        forward-only steps), so other modules run at full speed. While grad is
        disabled the backward hooks are left off too: torch would otherwise
        build backward-hook state for every module call.
        """
        self.compile_watch.arm()
        if self.suspender.active:
            return
        emitter = self.stacks.emitter
        listening = getattr(emitter, "listening", None)
        root = self.names.primary() if self.names.primary is not None else None
        if emitter is not None and (listening is None or listening()):
            grad = torch.is_grad_enabled()
            mode = ("all", self.names.inplace) if grad else ("forward", None)
        else:
            mode = ("root", root) if root is not None else ("find", None)
        if mode[0] != self._mode[0] or mode[1] is not self._mode[1]:
            self._remove(self._module_handles)
            self._module_handles = self._module_hook_handles(mode[0], root)
            self._mode = mode

    def _suspended(self, suspended: bool) -> None:
        """Suspender callback: take nsysmap's module hooks off, or put them back."""
        if suspended:
            self._remove(self._module_handles)
            self._mode = (None, None)
        else:
            self.refresh_module_hooks()

    def _named(self, calling: torch.nn.Module | None = None) -> None:
        """After modules were named: hooks for new compiled wrappers, listeners, refresh.

        `calling` is the module whose forward pre-hook named them: when it is a
        compiled wrapper, its own pre-hook was registered too late for this
        call, so the hooks are taken off here (its forward hook puts them back).
        """
        wrappers, self.names.wrappers = self.names.wrappers, []
        for wrapper in wrappers:
            self._wrapper_handles += wrapper_hooks(wrapper, self._forward[1], self.suspender)
            if wrapper is calling:
                self.suspender.suspend()
        root = self.names.primary() if self.names.primary is not None else None
        told = self._told_primary() if self._told_primary is not None else None
        if root is not None and root is not told:
            self._told_primary = weakref.ref(root)  # naming never keeps a model alive
            for listener in self.on_primary:
                listener(root)
        self.refresh_module_hooks()

    def _module_hook_handles(self, mode: str, root: torch.nn.Module | None) -> list[Any]:
        pre, post = self._forward
        if mode == "root" and root is not None:
            return [
                root.register_forward_pre_hook(pre),
                root.register_forward_hook(post, always_call=True),
            ]
        if mode == "find":
            return [nn_module.register_module_forward_pre_hook(self._find_root)]
        handles = [
            nn_module.register_module_forward_pre_hook(pre),
            nn_module.register_module_forward_hook(post, always_call=True),
        ]
        if mode == "all" and self.names.inplace:
            if not self._warned_inplace:
                self._warned_inplace = True
                _warn_inplace()
        elif mode == "all":
            bpre, bpost = self.modules.backward_hooks()
            handles.append(nn_module.register_module_full_backward_pre_hook(bpre))
            handles.append(nn_module.register_module_full_backward_hook(bpost))
        return handles

    def _find_root(self, module: torch.nn.Module, args: Any) -> None:
        """Global pre-hook while nothing listens and no root is known yet."""
        if self.stacks.get().fwd_depth or id(module) in self.names.by_id:
            return
        self._forward[0](module, args)  # names it the primary root, opens its range
        self.refresh_module_hooks()  # its own forward hook (read after forward) closes it

    @staticmethod
    def _remove(handles: list[Any]) -> None:
        for handle in handles:
            handle.remove()
        handles.clear()

    def _patch(self) -> None:
        phases, patch = self.phases, self._patches.replace
        patch(torch.autograd, "backward", lambda fn: phases.backward_call(fn, phase=True))
        patch(torch.autograd, "grad", lambda fn: phases.backward_call(fn, phase=False))
        patch(torch.optim.Optimizer, "zero_grad", lambda fn: phases.scoped(ZERO_GRAD, fn))
        patch(torch.nn.Module, "zero_grad", lambda fn: phases.scoped(ZERO_GRAD, fn))
        patch(dataloader._BaseDataLoaderIter, "__next__", phases.data_next)
        for name in LOSS_FUNCTIONS:
            if hasattr(F, name):
                patch(F, name, phases.loss_fn)

    def uninstall(self) -> None:
        """Close every open range, then remove all hooks and undo all patches."""
        try:
            self.phases.close_all()
            self.stacks.close_foreign(0)
        finally:
            self.phases.on_phase_begin = None
            self.compile_watch.disarm()
            self.suspender.reset()
            self._remove(self._handles)
            self._remove(self._module_handles)
            self._remove(self._wrapper_handles)
            self._mode = (None, None)
            self.modules.remove_accumulate_hooks()
            self._patches.undo()
            for entry in self._filters:
                with contextlib.suppress(ValueError):
                    # typeshed declares `filters` a Sequence; it is the module's list
                    warnings.filters.remove(entry)  # type: ignore[attr-defined]
            self._filters.clear()
            self.names.clear()
            self.stacks.forget_threads()


def _warn_inplace() -> None:
    warnings.warn(
        "nsysmap: the model has a module built with inplace=True; torch's full backward "
        "hooks cannot wrap in-place ops, so no module backward ranges are emitted "
        "(forward, step and phase ranges are). Build it with inplace=False to get them.",
        RuntimeWarning,
        stacklevel=2,
    )


_lock = threading.Lock()
_active: Session | None = None
_depth = 0


def install(
    model: torch.nn.Module | None = None,
    optimizer: Any | None = None,
    *,
    emit: str | Emitter = "auto",
) -> Session:
    """Install the instrumentation (or add a reference to the active one) and return it."""
    global _active, _depth
    with _lock:
        if _active is None:
            session = Session(emit)
            session.install()
            _active = session
        _depth += 1
        _active.adopt(model, optimizer)
        return _active


def uninstall() -> None:
    """Drop one reference; the last one removes everything `install` put in place."""
    global _active, _depth
    with _lock:
        if _active is None:
            return
        _depth -= 1
        if _depth > 0:
            return
        session, _active, _depth = _active, None, 0
    session.uninstall()


def active() -> Session | None:
    """The installed session, if any."""
    return _active


class annotate(contextlib.ContextDecorator):
    """Instrument everything inside: `with annotate(model, opt):` or `@annotate()`.

    `emit` is "auto", "nvtx", "torch", "off" or an Emitter object; it only
    matters for the outermost installation.
    """

    def __init__(
        self,
        model: torch.nn.Module | None = None,
        optimizer: Any | None = None,
        *,
        emit: str | Emitter = "auto",
    ) -> None:
        self.model, self.optimizer, self.emit = model, optimizer, emit

    def __enter__(self) -> Session:
        return install(self.model, self.optimizer, emit=self.emit)

    def __exit__(self, *exc: object) -> None:
        uninstall()
