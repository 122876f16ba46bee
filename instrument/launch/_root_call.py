"""The launcher's record of the profiled model, turned into DIR/flops.json after the run.

Once the session names its primary root module (the model), a forward hook on
that module waits for its first completed call, notes the shape and dtype of
its first tensor input, whether grad was enabled and the compute dtype, keeps
a reference to the model (the module itself for `torch.compile(model)`) and
removes itself. After profiling, `write` counts
one forward (and backward, if grad was enabled) of a meta-device copy of the
model on fake tensors (instrument/flops/: no weights copied, no kernels
run) and writes the FLOP document, with `compute_dtype` and `source` added,
to DIR/flops.json. Counting never raises: a failure becomes a note.

A data-parallel wrapper is not what is counted: inside DistributedDataParallel
(or DataParallel) the model the script built is, so that counting never runs
the wrapper's forward, which would talk to the process group (gone by then,
and never to be called outside the script's own collectives). A model sharded
by FSDP is not counted, with a one-line reason: its parameters are shards.
The document's module paths are then written as the ranges name them: the
wrapper is the root (`""`) and the model its child `module`, so that
`transformer.h.0.attn` is counted as `module.transformer.h.0.attn`, the name
its kernels carry (`wrapped_paths`).
"""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import torch

from instrument import contract
from instrument.ranges._compile import unwrap

NO_CALL = "no forward call of the model with a tensor input was seen: no flops.json"


class RootCall:
    """Watches for the primary root's first forward call (see the module docstring)."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self.model: torch.nn.Module | None = None
        self.input_shape: list[int] | None = None
        self.input_dtype: str | None = None
        self.grad_enabled = True
        self.compute_dtype: str | None = None
        self._handle: Any = None
        self._done = False
        session.on_primary.append(self._attach)

    def _attach(self, root: torch.nn.Module) -> None:
        """Session listener: the primary root was named (or changed); watch its calls."""
        if self._done:
            return
        if self._handle is not None:
            self._handle.remove()
        self._handle = root.register_forward_hook(self._hook, with_kwargs=True)

    def _hook(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        self.detach()
        tensor = next(
            (a for a in itertools.chain(args, kwargs.values()) if isinstance(a, torch.Tensor)),
            None,
        )
        if tensor is None:
            return
        self.model = unwrap(module)
        self.input_shape = list(tensor.shape)
        self.input_dtype = str(tensor.dtype).removeprefix("torch.")
        self.grad_enabled = torch.is_grad_enabled()
        self.compute_dtype = compute_dtype(module, tensor.device.type)

    def detach(self) -> None:
        """Remove the hook and stop watching (idempotent)."""
        self._done = True
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def write(self, out_dir: Path, interrupted: bool = False) -> str | None:
        """Count the model and write DIR/flops.json; returns a note when it did not."""
        self.detach()
        if interrupted:
            self.model = None
            return "the run was interrupted: FLOPs not counted, no flops.json"
        if self.model is None:
            return NO_CALL
        model, why_not = script_model(self.model)
        wrappers = data_parallel(self.model)[1]
        if model is None:
            self.model = None
            return f"FLOPs not counted, no flops.json: {why_not}"
        from instrument.flops import count_flops

        try:
            doc = count_flops(
                meta_copy(model),
                input_shape=tuple(self.input_shape or ()),
                input_dtype=self.input_dtype or "int64",
                backward=self.grad_enabled,
            )
        except (Exception, KeyboardInterrupt) as exc:  # the run's outcome must still be recorded
            line = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            return f"FLOP counting failed, no flops.json: {line}"
        finally:
            self.model = None
        doc = wrapped_paths(doc, wrappers)
        doc.update(
            model=doc["model_class"], compute_dtype=self.compute_dtype, source="instrument.launch"
        )
        (out_dir / contract.FLOPS).write_text(json.dumps(doc) + "\n")
        return None


def script_model(model: torch.nn.Module) -> tuple[torch.nn.Module | None, str]:
    """The module to count: the model inside a data-parallel wrapper; None and why for a
    model that FSDP shards."""
    model = data_parallel(model)[0]
    sharded = [type(m).__name__ for m in model.modules() if _fsdp(m)]
    if sharded:
        return None, (
            f"the model is sharded by FSDP ({sharded[0]}): its parameters are shards, "
            "and its forward gathers them through the process group"
        )
    return model, ""


def data_parallel(model: torch.nn.Module) -> tuple[torch.nn.Module, list[str]]:
    """The model inside its data-parallel wrappers, and their classes, outermost first
    (DistributedDataParallel, DataParallel; none for a bare model). A compiled model
    inside one (`DDP(torch.compile(model))`) is the module it compiled, as the ranges
    name it (no `_orig_mod`)."""
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    found = []
    while isinstance(model, (DistributedDataParallel, DataParallel)):
        found.append(type(model).__name__)
        model = unwrap(model.module)
    return model, found


def wrapped_paths(doc: dict[str, Any], wrappers: list[str]) -> dict[str, Any]:
    """`doc` with its module paths as the ranges name them inside `wrappers`.

    The session names the modules from the outermost wrapper down (its
    `named_modules()`): the wrapper is `""`, the model `module`, its layers
    `module.<path>`. Each wrapper adds one `module.` and is listed as a
    module of its own, with no FLOPs of its own::

        counted      "", "transformer.h.0"
        inside DDP   "" (DistributedDataParallel), "module", "module.transformer.h.0"
    """
    if not wrappers:
        return doc
    prefix = ".".join(["module"] * len(wrappers))

    def path(module: str | None) -> str | None:
        if module is None:
            return None
        return f"{prefix}.{module}" if module else prefix

    def renamed(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**entry, "module": path(entry.get("module"))} for entry in entries]

    outer = [
        {"module": ".".join(["module"] * depth), "module_class": cls}
        for depth, cls in enumerate(wrappers)
    ]
    out = {
        **doc,
        "rows": renamed(doc.get("rows", [])),
        "modules": outer + renamed(doc.get("modules", [])),
    }
    counter = doc.get("flop_counter")
    if isinstance(counter, dict):
        out["flop_counter"] = {**counter, "modules": renamed(counter.get("modules", []))}
    return out


def _fsdp(module: torch.nn.Module) -> bool:
    """Is `module` wrapped or sharded by FSDP (FullyShardedDataParallel, or fully_shard)?"""
    return any(
        cls.__name__ in ("FullyShardedDataParallel", "FSDPModule") for cls in type(module).__mro__
    )


def compute_dtype(module: torch.nn.Module, device_type: str) -> str:
    """The dtype matmuls ran in: autocast's, else the parameters' ("tf32" when enabled)."""
    try:
        if torch.is_autocast_enabled(device_type):
            return str(torch.get_autocast_dtype(device_type)).removeprefix("torch.")
    except (RuntimeError, TypeError):  # a device type autocast does not know
        pass
    param = next((p for p in module.parameters() if p.is_floating_point()), None)
    dtype = torch.float32 if param is None else param.dtype
    if dtype == torch.float32 and device_type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    return str(dtype).removeprefix("torch.")


def meta_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` whose parameters and buffers are on the meta device (no data copied)."""
    memo: dict[int, Any] = {}
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        empty = torch.empty_like(tensor, device="meta")
        if isinstance(tensor, torch.nn.Parameter):
            empty = torch.nn.Parameter(empty, requires_grad=tensor.requires_grad)
        memo[id(tensor)] = empty
    return copy.deepcopy(model, memo)
