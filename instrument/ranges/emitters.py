"""Where range begin/end events go: NVTX, torch.profiler annotations, or nowhere.

An emitter turns a range name into a *payload* once (`prepare`, cached per
module), then `push(payload)` opens a range on the calling thread and returns
a token that `pop(token)` needs to close it. Every push is popped on the
thread that pushed it, in LIFO order; the hooks guarantee that. An emitter
may also have `listening() -> bool`: when it says False at the start of a
step, the per-module hooks are detached for that step (see session.py);
emitters without it are taken to listen always.

Chosen once at install (`make_emitter`):

    "nvtx"   NVTX push/pop in the `nsysmap` domain
    "torch"  torch.profiler user annotations, only while a profiler is active
    "auto"   nvtx when a tool listens, plus torch annotations while profiling
    "off"    nothing

`make_emitter` returns None when nothing could ever listen (off, or nvtx with
no NVTX tool attached): the hooks then skip emission entirely.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from instrument.ranges.naming import DOMAIN

EMIT_CHOICES = ("auto", "nvtx", "torch", "off")


class Emitter(Protocol):
    """What the hooks need from an emitter."""

    def prepare(self, name: str) -> Any:
        """Turn a range name into whatever `push` wants (done once per name)."""

    def push(self, payload: Any) -> Any:
        """Open a range on this thread; return the token `pop` needs."""

    def pop(self, token: Any) -> None:
        """Close the range `push` returned `token` for (same thread, LIFO)."""


class NvtxEmitter:
    """NVTX push/pop ranges in the `nsysmap` domain, messages as registered strings."""

    def __init__(self, domain: Any) -> None:
        self._domain = domain

    def prepare(self, name: str) -> Any:
        return self._domain.get_event_attributes(message=name)

    def push(self, payload: Any) -> bool:
        self._domain.push_range(payload)
        return True

    def pop(self, token: Any) -> None:
        self._domain.pop_range()


class TorchEmitter:
    """torch.profiler user annotations, emitted only while a profiler is active.

    Uses the public `torch.profiler.record_function` object with explicit
    `__enter__`/`__exit__` (no `with`, since a range opens in one hook and
    closes in another). `torch.autograd._profiler_enabled()` reads the
    thread-local profiler state, which the autograd engine propagates to its
    worker threads, so backward ranges are recorded there too.
    """

    def __init__(self) -> None:
        self._enabled = torch.autograd._profiler_enabled
        self._record = torch.profiler.record_function

    def listening(self) -> bool:
        """True while a torch profiler records on this thread."""
        return self._enabled()

    def prepare(self, name: str) -> str:
        return name

    def push(self, payload: str) -> Any:
        if not self._enabled():
            return None
        handle = self._record(payload)
        handle.__enter__()
        return handle

    def pop(self, token: Any) -> None:
        if token is not None:
            token.__exit__(None, None, None)


class BothEmitter:
    """NVTX and torch annotations at once (the "auto" choice when NVTX listens)."""

    def __init__(self, nvtx_emitter: NvtxEmitter, torch_emitter: TorchEmitter) -> None:
        self._nvtx = nvtx_emitter
        self._torch = torch_emitter

    def prepare(self, name: str) -> tuple[Any, str]:
        return (self._nvtx.prepare(name), name)

    def push(self, payload: tuple[Any, str]) -> Any:
        self._nvtx.push(payload[0])
        return self._torch.push(payload[1])

    def pop(self, token: Any) -> None:
        self._torch.pop(token)
        self._nvtx.pop(True)


def nvtx_domain() -> Any | None:
    """The NVTX domain object, or None when nvtx is missing or no tool listens.

    The nvtx package hands out a dummy domain when no NVTX tool (such as
    Nsight Systems) is injected into the process; ranges sent there go nowhere.
    """
    try:
        import nvtx
    except ImportError:
        return None
    domain = nvtx.get_domain(DOMAIN)
    if type(domain).__name__ == "DummyDomain":
        return None
    return domain


def make_emitter(emit: str | Emitter) -> Emitter | None:
    """Resolve an emit choice (or pass an Emitter object through); None means silent."""
    if not isinstance(emit, str):
        return emit
    if emit not in EMIT_CHOICES:
        raise ValueError(f"emit must be one of {EMIT_CHOICES}, got {emit!r}")
    if emit == "off":
        return None
    if emit == "torch":
        return TorchEmitter()
    domain = nvtx_domain()
    if emit == "nvtx":
        return NvtxEmitter(domain) if domain is not None else None
    if domain is None:
        return TorchEmitter()
    return BothEmitter(NvtxEmitter(domain), TorchEmitter())
