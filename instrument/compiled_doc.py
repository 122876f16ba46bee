"""`compiled.json`: which modules each compiled kernel came from (the contract).

Written by instrument/launch/provenance.py at capture time, read by
nsysmap/attribution/compiled_modules.py; this module is the one both import, so it
imports neither torch nor polars. Documented in docs/compile.md.

    {"format": "nsysmap.compiled", "version": 1, "torch_version": "2.13.0+cpu",
     "graphs": [{"key": "f6vz...", "direction": "forward",
                 "kernels": [{"kernel": "cpp_fused_gelu_1", "source": "cpp_fused_gelu_1:3",
                              "modules": ["blocks.0.act"]}, ...]}],
     "classes": {"blocks.0.act": "GELU", ...},
     "notes": []}

* `key` is Inductor's FX graph cache key: at run time every call of that
  graph is the torch.profiler range `## Call CompiledFxGraph <key> ##`.
* `kernels` lists the graph's kernel calls in the order its code makes them;
  `kernel` is the name the call has in a trace (a CPU kernel's event is
  `graph_<n>_<kernel>`, see `RUNTIME_PREFIX`; an extern kernel such as
  `extern_kernels.addmm` runs as the operator `aten::addmm`), `source` is
  Inductor's provenance name. The n-th call of a kernel name inside one call
  of the graph is the n-th entry of that name here.
* `modules` are the modules the kernel's FX nodes came from, relative to the
  compiled region's root ("" is the root itself), `_orig_mod` left out;
  empty when no node carried a module. A kernel fused across modules is
  attributed to their nearest common module (`common_module`).
"""

from __future__ import annotations

import re
from typing import Any

from instrument.contract import COMPILED

FILE = COMPILED  # the capture directory's name for it (instrument/contract.py)
FORMAT = "nsysmap.compiled"
VERSION = 1
DIRECTIONS = ("forward", "backward")
# The torch.profiler range around every call of a compiled graph.
CALL_PREFIX = "## Call CompiledFxGraph "
CALL_RANGE = r"^## Call CompiledFxGraph (\S+) ##$"
# CPU kernels are recorded as `graph_<id>_<kernel>` (Inductor's cpp kernel profile).
RUNTIME_PREFIX = r"^graph_\d+_"
_HANDLE = re.compile(r":\d+$")
_SOURCE_ROOT = re.compile(r"^(?:[LG]\['[^']*'\]|self)")
_INDEX = re.compile(r"\[(\d+)\]|\._modules\['([^']*)'\]|\[['\"]([^'\"]*)['\"]\]")


class DocumentError(ValueError):
    """compiled.json is not a document this version understands."""


def kernel_name(source: str) -> str:
    """The trace name of a kernel call from Inductor's provenance name.

    `cpp_fused_gelu_1:3` -> `cpp_fused_gelu_1`; `extern_kernels.addmm:2` ->
    `aten::addmm`; `aten.native_layer_norm_backward.default:5` ->
    `aten::native_layer_norm_backward`.
    """
    name = _HANDLE.sub("", source)
    if name.startswith("extern_kernels."):
        return "aten::" + name.removeprefix("extern_kernels.").split(".")[0]
    if "aten." in name:
        return "aten::" + name.rsplit("aten.", 1)[1].split(".")[0]
    return name


def module_path(fqn: str) -> str:
    """A module's path below the compiled region's root, from Dynamo's `nn_module_stack`.

    `L['self'].blocks.1.act` -> `blocks.1.act`; `L['self']._orig_mod.head` ->
    `head`; `L['self'].layers[0]` -> `layers.0`; `L['self']` -> "".
    """
    rest = _SOURCE_ROOT.sub("", fqn, count=1)
    rest = _INDEX.sub(lambda m: "." + next(g for g in m.groups() if g is not None), rest)
    return ".".join(p for p in rest.split(".") if p and p != "_orig_mod")


def common_module(paths: list[str]) -> str | None:
    """The nearest module containing all `paths` ("" the root); None for no path.

    `["blocks.0", "blocks.1.ln"]` -> `blocks`; `["blocks.0.fc1"]` -> `blocks.0.fc1`.
    """
    if not paths:
        return None
    split = [p.split(".") if p else [] for p in paths]
    common: list[str] = []
    for parts in zip(*split, strict=False):
        if any(part != parts[0] for part in parts):
            break
        common.append(parts[0])
    return ".".join(common)


def document(
    graphs: list[dict[str, Any]], classes: dict[str, str], torch_version: str, notes: list[str]
) -> dict[str, Any]:
    """The compiled.json document (see the module docstring)."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "torch_version": torch_version,
        "graphs": graphs,
        "classes": classes,
        "notes": notes,
    }


def kernel_rows(doc: Any) -> list[dict[str, Any]]:
    """One row per kernel call of every graph, with its occurrence and common module.

    Raises DocumentError for anything that is not a version-1 document.
    """
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise DocumentError("not an nsysmap compiled-kernel document")
    if doc.get("version") != VERSION:
        raise DocumentError(f"compiled-kernel document version {doc.get('version')!r}")
    classes = doc.get("classes") or {}
    rows = []
    for graph in _list(doc.get("graphs")):
        key, direction = graph.get("key"), graph.get("direction")
        if not isinstance(key, str) or direction not in DIRECTIONS:
            raise DocumentError(f"graph without a key or direction: {str(graph)[:80]}")
        seen: dict[str, int] = {}
        for site, kernel in enumerate(_list(graph.get("kernels"))):
            name = kernel.get("kernel")
            modules = [m for m in _list(kernel.get("modules")) if isinstance(m, str)]
            if not isinstance(name, str):
                raise DocumentError(f"kernel without a name in graph {key}")
            module = common_module(modules)
            rows.append(
                {
                    "graph": key,
                    "graph_direction": direction,
                    "site": site,
                    "kernel": name,
                    "occurrence": seen.get(name, 0),
                    "rel_module": module,
                    "rel_class": classes.get(module) if module is not None else None,
                    "rel_modules": sorted(set(modules)),
                }
            )
            seen[name] = seen.get(name, 0) + 1
    return rows


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise DocumentError("expected a list")
    return value
