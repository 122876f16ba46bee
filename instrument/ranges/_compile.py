"""Keeping the instrumentation invisible to `torch.compile` (see docs/compile.md).

Dynamo must neither trace nsysmap's hooks nor guard on their state, and the
hooks must add no graph break. Three measures, all undone at uninstall:

* **While Dynamo compiles**, nsysmap's global module hooks are removed (the
  Dynamo start/end compile callbacks suspend and resume them): the graphs are
  traced exactly as without instrumentation. Dynamo does not guard on global
  hooks (`torch._dynamo.config.skip_nnmodule_hook_guards`, on by default), so
  putting them back afterwards causes no recompile.
* **While a compiled module runs** (`torch.compile(model)` returns an
  `OptimizedModule` wrapping the model), the global hooks are removed too:
  the wrapper's own forward is one module range (named like the model it
  wraps, `_orig_mod` left out of every path) and nothing inside it calls a
  hook. Its full backward hook still gives the model one backward range.
* The patched loss functions and phase wrappers pass straight through when
  `torch.compiler.is_compiling()`.
* Every function of instrument/ is marked for Dynamo to skip as a frame: a
  hook that runs eagerly while a compiled function is active (the root's own
  `_call_impl` under `module.compile()`, code after a graph break) is run as
  plain Python, never compiled. Inlining is not affected.

Importing torch._dynamo costs seconds, so nothing here imports it: the
compile callbacks are registered (`arm`) once a script has imported it.

    step:  [forward [fwd:Net: (OptimizedModule) ......... ]]  global hooks off inside
    compile:        |-- start cb: hooks off --| end cb: hooks back on
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

CompileListener = Callable[[int, int], None]  # (start_ns, end_ns) of one compilation
# Modules whose code runs from hooks and patches inside the training process.
RUNTIME_MODULES = (
    "instrument.launch._root_call",
    "instrument.launch._window",
    "instrument.ranges._compile",
    "instrument.ranges._modules",
    "instrument.ranges._names",
    "instrument.ranges._patch",
    "instrument.ranges._phases",
    "instrument.ranges._state",
    "instrument.ranges.emitters",
    "instrument.ranges.session",
)


def is_compiled_wrapper(module: Any) -> bool:
    """True for the `OptimizedModule` that `torch.compile(module)` returns."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    cls = getattr(eval_frame, "OptimizedModule", None)
    return cls is not None and isinstance(module, cls)


def unwrap(module: Any) -> Any:
    """The module a compiled wrapper wraps (through nested wrappers); else `module`."""
    while is_compiled_wrapper(module):
        module = module._orig_mod
    return module


def code_objects(module: types.ModuleType) -> Iterator[types.CodeType]:
    """Every code object defined in `module`: functions, methods, nested closures."""
    stack: list[types.CodeType] = []
    for value in vars(module).values():
        if getattr(value, "__module__", None) != module.__name__:
            continue
        members = vars(value).values() if inspect.isclass(value) else (value,)
        for member in members:
            for fn in (member, getattr(member, "__func__", None), getattr(member, "fget", None)):
                if isinstance(fn, types.FunctionType):
                    stack.append(fn.__code__)
    while stack:
        code = stack.pop()
        yield code
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))


def skip_frames(module_names: tuple[str, ...]) -> None:
    """Tell Dynamo never to compile a frame of these modules (see the module docstring)."""
    from torch._dynamo.eval_frame import skip_code

    for name in module_names:
        module = sys.modules.get(name)
        if module is not None:
            for code in code_objects(module):
                skip_code(code)


class Suspender:
    """A reference count of reasons to keep the global hooks off, thread-safe.

    `on_change(True)` is called when the first reason starts, `on_change(False)`
    when the last one ends; a `resume` without a `suspend` is ignored.
    """

    def __init__(self, on_change: Callable[[bool], None]) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._on_change = on_change

    @property
    def active(self) -> bool:
        return self._count > 0

    def suspend(self) -> None:
        with self._lock:
            self._count += 1
            first = self._count == 1
        if first:
            self._on_change(True)

    def resume(self) -> None:
        with self._lock:
            if self._count == 0:
                return
            self._count -= 1
            last = self._count == 0
        if last:
            self._on_change(False)

    def reset(self) -> None:
        with self._lock:
            self._count = 0


class CompileWatch:
    """Dynamo compile callbacks: hooks off while compiling, and each compilation timed.

    `start_listeners` are called as a compilation starts; `listeners` get
    `(start_ns, end_ns)` (time.perf_counter_ns) of every compilation Dynamo
    runs (a frame, or a backward compiled lazily) when it ends.
    """

    def __init__(self, suspender: Suspender) -> None:
        self._suspender = suspender
        self._armed = False
        self._starts: dict[int, int] = {}  # thread -> start of its running compilation
        self.listeners: list[CompileListener] = []
        self.start_listeners: list[Callable[[], None]] = []
        self.compiles = 0

    def arm(self) -> None:
        """Register the compile callbacks once torch._dynamo is loaded (idempotent, cheap).

        Checked again each time: `torch._dynamo.reset()` clears every callback.
        """
        dynamo = sys.modules.get("torch._dynamo")
        handler = getattr(dynamo, "callback_handler", None)
        if handler is None or self._start in handler.start_callbacks:
            return
        skip_frames(RUNTIME_MODULES)
        handler.register_start_callback(self._start)
        handler.register_end_callback(self._end)
        self._armed = True

    def disarm(self) -> None:
        """Remove the callbacks (at uninstall)."""
        if not self._armed:
            return
        import torch._dynamo

        handler = torch._dynamo.callback_handler
        for remove, callback in (
            (handler.remove_start_callback, self._start),
            (handler.remove_end_callback, self._end),
        ):
            with contextlib.suppress(ValueError):  # already cleared (torch._dynamo.reset())
                remove(callback)
        self._armed = False

    def _start(self, args: Any) -> None:
        self._starts[threading.get_ident()] = time.perf_counter_ns()
        self.compiles += 1
        self._suspender.suspend()
        for listener in self.start_listeners:
            listener()

    def _end(self, args: Any) -> None:
        end = time.perf_counter_ns()
        start = self._starts.pop(threading.get_ident(), end)
        self._suspender.resume()
        for listener in self.listeners:
            listener(start, end)


def wrapper_hooks(wrapper: Any, post: Callable[..., None], suspender: Suspender) -> list[Any]:
    """Hooks on a compiled wrapper: nsysmap's global hooks off while it runs.

    Its global pre-hook (run before these) opened its range; the forward hook
    here closes it with `post`, since the global one is off by then.
    """

    def leave(module: Any, args: Any, output: Any) -> None:
        try:
            post(module, args, output)
        finally:
            suspender.resume()

    return [
        wrapper.register_forward_pre_hook(lambda module, args: suspender.suspend()),
        wrapper.register_forward_hook(leave, always_call=True),
    ]
