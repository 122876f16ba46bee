"""Which modules each Inductor kernel came from, recorded while a script compiles.

Inside a compiled region no module is called, so no hook can mark it; the
kernels come from FX nodes whose `nn_module_stack` Inductor knows. For every
graph Inductor compiles, `Provenance` puts together (all while compiling,
nothing at run time):

1. node -> module: a read-only post-grad pass (`post_grad_custom_post_pass`)
   reads each node's `nn_module_stack` (forward nodes) or
   `fwd_nn_module_stack` (backward nodes) and whether the graph is a
   backward graph (it has `tangents` inputs);
2. kernel call -> nodes: Inductor's provenance tracking
   (`config.trace.provenance_tracking_level = 1`) numbers every kernel call
   site; when Inductor logs the kernel stack-trace artifact of the graph
   (torch's structured trace log, the channel tlparse reads), its kernel
   information is read (`torch._inductor.debug.create_kernel_information_json`);
3. the graph's FX cache key, from the `fx_graph_cache_*` artifact that
   follows: at run time every call of the graph is the profiler range
   `## Call CompiledFxGraph <key> ##`.

The pass has a fresh uuid per run, so Inductor's FX graph and AOTAutograd
caches miss once per run and every graph is lowered in this process (the
compiled code is the same; only lowering time is added, in the warm-up).
`cpp.enable_kernel_profile` makes CPU kernels visible to torch.profiler.
Everything is set when the first compilation starts (torch._inductor is not
imported before) and restored at `uninstall`. Any failure is a note, never a
failed run. The document format is instrument/compiled_doc.py.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from pathlib import Path
from typing import Any

import torch

from instrument import compiled_doc

TRACE_LOGGER = "torch.__trace"  # torch's structured trace log (TORCH_TRACE, tlparse)
_KERNEL_ARTIFACT = "inductor_provenance_tracking_kernel_stack_traces"
_CACHE_ARTIFACT = "fx_graph_cache_"


def _node_pass(owner: Provenance) -> Any:
    """The post-grad pass: records node -> module of each graph, changes nothing.

    A `CustomGraphPass` (Inductor's documented extension point, imported only
    once compiling) with a fresh uuid, which Inductor puts in its cache keys.
    """
    from torch._inductor.custom_graph_pass import CustomGraphPass

    run = f"nsysmap-provenance-{uuid.uuid4().hex}"

    class NodeModules(CustomGraphPass):
        def __call__(self, graph: Any) -> None:
            owner.graph_nodes(graph)

        def uuid(self) -> str:
            return run

    return NodeModules()


class _ArtifactHandler(logging.Handler):
    """Receives torch's structured trace records on the compiling thread."""

    def __init__(self, owner: Provenance) -> None:
        super().__init__(logging.DEBUG)
        self._owner = owner

    def emit(self, record: logging.LogRecord) -> None:
        metadata = getattr(record, "metadata", None)
        if not isinstance(metadata, dict) or "artifact" not in metadata:
            return
        name = str(metadata["artifact"].get("name", ""))
        try:
            if name == _KERNEL_ARTIFACT:
                self._owner.graph_kernels()
            elif name.startswith(_CACHE_ARTIFACT):
                payload = getattr(record, "payload", None)
                key = json.loads(payload).get("key") if payload else None
                self._owner.graph_done(key, name.removeprefix(_CACHE_ARTIFACT))
        except Exception as exc:  # provenance must never break compilation
            self._owner.note(f"kernel provenance not recorded: {type(exc).__name__}: {exc}")


class Provenance:
    """Collects compiled.json while the script runs (see the module docstring)."""

    def __init__(self) -> None:
        self.graphs: list[dict[str, Any]] = []
        self.classes: dict[str, str] = {}
        self.notes: list[str] = []
        self._pending = threading.local()
        self._saved: list[tuple[Any, str, Any]] = []
        self._handler: _ArtifactHandler | None = None
        self._logger_level: int | None = None
        self._started = False
        self._lock = threading.Lock()

    # -- install / uninstall ---------------------------------------------------
    def compile_started(self, *_: Any) -> None:
        """Compile-start listener: configure Inductor before its first compilation."""
        if self._started:
            return
        self._started = True
        try:
            self._configure()
        except Exception as exc:
            self.note(f"kernel provenance is off: {type(exc).__name__}: {exc}")

    def _configure(self) -> None:
        from torch._inductor import config

        self._set(config.trace, "provenance_tracking_level", 1)
        self._set(config.cpp, "enable_kernel_profile", True)
        current = config.post_grad_custom_post_pass
        passes = (
            []
            if current is None
            else list(current)
            if isinstance(current, (list, tuple))
            else [current]
        )
        self._set(config, "post_grad_custom_post_pass", [*passes, _node_pass(self)])
        logger = logging.getLogger(TRACE_LOGGER)
        self._handler = _ArtifactHandler(self)
        self._logger_level = logger.level
        logger.addHandler(self._handler)
        if not logger.isEnabledFor(logging.DEBUG):
            logger.setLevel(logging.DEBUG)

    def _set(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def uninstall(self) -> None:
        """Put Inductor's settings and the trace log back as they were."""
        while self._saved:
            owner, name, value = self._saved.pop()
            setattr(owner, name, value)
        if self._handler is not None:
            logger = logging.getLogger(TRACE_LOGGER)
            logger.removeHandler(self._handler)
            if self._logger_level is not None:
                logger.setLevel(self._logger_level)
            self._handler = None

    # -- one graph at a time, on the compiling thread --------------------------
    def graph_nodes(self, graph: Any) -> None:
        """Post-grad pass: node name -> module path, and the graph's direction."""
        nodes: dict[str, str] = {}
        backward = False
        for node in graph.nodes:
            if node.op == "placeholder" and node.name.startswith("tangents"):
                backward = True
            stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack")
            if node.op == "call_function" and stack:
                nodes[node.name] = self._innermost(stack)
        # Inductor does not reset its kernel records before a backward compiled
        # lazily: the kernels already recorded now belong to earlier graphs.
        earlier = set(_kernel_information())
        self._pending.graph = {
            "nodes": nodes,
            "backward": backward,
            "kernels": None,
            "earlier": earlier,
        }

    def _innermost(self, stack: dict[str, Any]) -> str:
        """The module path of the innermost entry; classes noted for every entry."""
        path = ""
        for fqn, cls in stack.values():
            path = compiled_doc.module_path(str(fqn))
            name = getattr(cls, "__name__", None) or str(cls).rsplit(".", 1)[-1].strip("'>")
            with self._lock:
                self.classes.setdefault(path, name)
        return path

    def graph_kernels(self) -> None:
        """Kernel stack-trace artifact: read the kernel call sites of this graph."""
        pending = getattr(self._pending, "graph", None)
        if pending is None:
            return
        info = _kernel_information()
        pending["kernels"] = sorted(
            (
                (source, list(entry.get("post_grad_nodes") or []))
                for source, entry in info.items()
                if source not in pending["earlier"]
            ),
            key=lambda item: _handle(item[0]),
        )

    def graph_done(self, key: str | None, cache_state: str) -> None:
        """Cache artifact: the graph is complete; record it under its key."""
        pending = getattr(self._pending, "graph", None)
        self._pending.graph = None
        if pending is None or pending["kernels"] is None:
            self.note(f"graph {key}: Inductor did not lower it here ({cache_state}), no provenance")
            return
        nodes = pending["nodes"]
        kernels = [
            {
                "kernel": compiled_doc.kernel_name(source),
                "source": source,
                "modules": sorted({nodes[n] for n in names if n in nodes}),
            }
            for source, names in pending["kernels"]
        ]
        direction = "backward" if pending["backward"] else "forward"
        with self._lock:
            self.graphs.append({"key": str(key), "direction": direction, "kernels": kernels})

    def note(self, text: str) -> None:
        with self._lock:
            if text not in self.notes:
                self.notes.append(text)

    def write(self, out_dir: Path) -> str | None:
        """Write DIR/compiled.json when anything was compiled; returns its name."""
        if not self._started:
            return None
        doc = compiled_doc.document(self.graphs, self.classes, torch.__version__, self.notes)
        (out_dir / compiled_doc.FILE).write_text(json.dumps(doc, indent=1) + "\n")
        return compiled_doc.FILE


def _kernel_information() -> dict[str, Any]:
    """Inductor's record of the kernel calls of the graph it is compiling."""
    from torch._inductor import debug

    return debug.create_kernel_information_json()


def _handle(source: str) -> int:
    """Inductor's call-site number: `cpp_fused_gelu_1:3` -> 3."""
    tail = source.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0
