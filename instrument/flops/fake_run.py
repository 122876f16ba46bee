"""Run one forward (and backward) on fake tensors and count it, for instrument/flops/.

FakeTensorMode gives every tensor a shape, dtype and device but no storage,
and runs each operator's shape function instead of its kernel: a 124M-
parameter GPT-2 is built and run in well under a second with no memory for
weights or activations. Two counters watch the same run: `OpRecorder`
(innermost module, per direction, per shape; see flops_trace.py) and
PyTorch's own `FlopCounterMode`, whose per-module totals include submodules
and serve as a cross-check.
"""

from __future__ import annotations

import copy
import inspect
import sys
import time
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

from instrument.flops.models import Factory, SpecError
from instrument.flops.ops import EXTRA_FORMULAS
from instrument.flops.trace import ModuleClock, OpRecorder, row_dicts

FORMAT = "nsysmap-flops"
VERSION = 1
LOGITS = ("all", "last")


def materialise(model: torch.nn.Module | Factory) -> torch.nn.Module:
    """A model whose tensors are all fake; call inside FakeTensorMode.

    A factory is called here, so it allocates nothing. A module must be on the
    meta device: give `meta_copy(module)`, made before entering the mode.
    """
    if isinstance(model, torch.nn.Module):
        return model.to_empty(device="cpu")
    built = model()
    if not isinstance(built, torch.nn.Module):
        raise SpecError(f"the factory returned {type(built).__name__}, not an nn.Module")
    return built


def meta_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of a meta-device module (cheap: no data), so the caller's is never changed."""
    tensors = [*model.parameters(), *model.buffers()]
    if any(t.device.type != "meta" for t in tensors):
        raise SpecError("pass a factory, or a module built on the meta device")
    return copy.deepcopy(model)


def count(
    model: torch.nn.Module | Factory,
    input_shape: tuple[int, ...],
    *,
    input_dtype: torch.dtype = torch.long,
    backward: bool = True,
    logits: str = "all",
) -> dict[str, Any]:
    """Count one step's operators; returns the JSON document (see docs/flops.md)."""
    if logits not in LOGITS:
        raise SpecError(f"logits must be one of {LOGITS}, got {logits!r}")
    started, rss_before = time.perf_counter(), peak_rss_bytes()
    if isinstance(model, torch.nn.Module):
        model = meta_copy(model)
    with FakeTensorMode(allow_non_fake_inputs=True):
        module = materialise(model)
        kwargs = _logits_kwargs(module, logits)
        inputs = torch.zeros(input_shape, dtype=input_dtype)
        clock = ModuleClock(module)
        counter = FlopCounterMode(display=False, custom_mapping=EXTRA_FORMULAS)
        with clock, counter, OpRecorder(clock) as recorder:
            output = module(inputs, **kwargs)
            forward_counts = _inclusive(counter, module)
            if backward:
                seed = _seed(output)  # the reduction to a scalar counts as forward
                recorder.direction = "backward"
                seed.backward()
        total_counts = _inclusive(counter, module)
    doc = _document(module, input_shape, input_dtype, backward, logits)
    order = {entry["module"]: i for i, entry in enumerate(doc["modules"])}
    doc["rows"] = row_dicts(recorder.rows, order)
    doc["flop_counter"] = _counter_rows(forward_counts, total_counts)
    doc["count_seconds"] = round(time.perf_counter() - started, 3)
    doc["peak_rss_bytes"] = {"before": rss_before, "after": peak_rss_bytes()}
    return doc


def _document(
    module: torch.nn.Module,
    input_shape: tuple[int, ...],
    input_dtype: torch.dtype,
    backward: bool,
    logits: str,
) -> dict[str, Any]:
    """The document's description of what was counted."""
    config = getattr(module, "config", None)
    named = list(module.named_modules())
    return {
        "format": FORMAT,
        "version": VERSION,
        "torch_version": torch.__version__,
        "model_class": type(module).__name__,
        "parameters": sum(p.numel() for p in module.parameters()),
        "attn_implementation": getattr(config, "_attn_implementation", None),
        "input_shape": list(input_shape),
        "input_dtype": str(input_dtype).removeprefix("torch."),
        "backward": backward,
        "logits": logits,
        "modules": [{"module": p, "module_class": type(m).__name__} for p, m in named],
    }


def peak_rss_bytes() -> int | None:
    """This process's peak resident memory so far (None where unknown)."""
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _logits_kwargs(module: torch.nn.Module, logits: str) -> dict[str, Any]:
    if logits == "all":
        return {}
    if "logits_to_keep" not in inspect.signature(module.forward).parameters:
        raise SpecError(
            f"--logits last needs a forward with logits_to_keep ({type(module).__name__})"
        )
    return {"logits_to_keep": 1}


def _seed(output: Any) -> torch.Tensor:
    """The scalar to differentiate: the model's loss, else the sum of its first output."""
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    values = output.values() if isinstance(output, dict) else output
    first: torch.Tensor | None
    if isinstance(values, torch.Tensor):
        first = values
    else:
        first = next((v for v in values if isinstance(v, torch.Tensor)), None)
    if first is None or not first.requires_grad:
        raise SpecError("the model output has no tensor that requires grad: use --no-backward")
    return first.sum()


def _inclusive(counter: FlopCounterMode, module: torch.nn.Module) -> dict[str | None, int]:
    """FlopCounterMode's totals by module path ("Global" -> None), submodules included."""
    root = type(module).__name__
    totals: dict[str | None, int] = {}
    for name, per_op in counter.get_flop_counts().items():
        path = None if name == "Global" else ("" if name == root else name[len(root) + 1 :])
        totals[path] = sum(per_op.values())
    return totals


def _counter_rows(forward: dict[str | None, int], total: dict[str | None, int]) -> dict[str, Any]:
    """Forward totals were taken before the backward ran; backward is the rest."""
    modules = []
    for path in (p for p in total if p is not None):
        before = forward.get(path, 0)
        modules.append({"module": path, "direction": "forward", "matmul_flop": before})
        modules.append(
            {"module": path, "direction": "backward", "matmul_flop": total[path] - before}
        )
    before = forward.get(None, 0)
    totals = {"forward": before, "backward": total.get(None, 0) - before}
    return {"total": totals, "modules": modules}
