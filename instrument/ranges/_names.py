"""Which range name each nn.Module gets, without knowing the model in advance.

Names come from `named_modules()` of a *root*: the model given to
`annotate(model=...)`, or else any module whose forward starts while no
instrumented forward is open on that thread. The first root is the primary
one (path "", its forward is the `forward` phase); later, distinct roots
(a loss module called at top level, a second model) get the path prefix
`@<Class>` (`@<Class>#2` for the next root of the same class). A module
called inside a forward but absent from every root's tree is named under
its caller: `<caller path>.~<Class>`. The first name a module gets stays.

A compiled wrapper (`torch.compile(module)` returns an `OptimizedModule`
holding the module as `_orig_mod`) is named like the module it wraps, with
its class, and `_orig_mod` is left out of every path: `torch.compile(model)`
as a root is `fwd:Net:` and its children `blocks.0.fc1`, as without compile.

Entries are keyed by `id(module)` and dropped by a weakref callback when the
module is garbage collected, so naming never keeps a model alive.
"""

from __future__ import annotations

import weakref
from collections import Counter
from typing import Any

import torch

from instrument.ranges._compile import is_compiled_wrapper, unwrap
from instrument.ranges._state import Stacks
from instrument.ranges.naming import module_range


class ModInfo:
    """Prepared range payloads and the path of one module."""

    __slots__ = ("bwd", "fwd", "path", "ref", "root")

    def __init__(self, fwd: Any, bwd: Any, path: str, ref: weakref.ref, root: bool) -> None:
        self.fwd = fwd
        self.bwd = bwd
        self.path = path
        self.ref = ref
        self.root = root  # the primary root: its forward is the forward phase


class Names:
    """`id(module) -> ModInfo` for every module named so far."""

    def __init__(self, stacks: Stacks) -> None:
        self._stacks = stacks
        self.by_id: dict[int, ModInfo] = {}
        self.primary: weakref.ref | None = None
        self.inplace = False  # some named module modifies its input in place
        self.wrappers: list[torch.nn.Module] = []  # compiled wrappers named since last drained
        self._alias_refs: dict[int, weakref.ref] = {}  # keeps the wrappers' weakrefs alive
        self._root_classes: Counter[str] = Counter()

    def name_tree(self, root: torch.nn.Module, prefix: str, primary: bool) -> ModInfo:
        """Name `root` and all its submodules under `prefix`; returns root's info."""
        if primary:
            self.primary = weakref.ref(root)
        inner = unwrap(root)
        wrappers = [root] if inner is not root else []
        for path, module in inner.named_modules(remove_duplicate=True):
            if is_compiled_wrapper(module):
                wrappers.append(module)
            if id(module) in self.by_id or is_compiled_wrapper(module):
                continue
            path = strip_wrapper_segments(path)
            full = f"{prefix}.{path}" if prefix and path else (prefix or path)
            self._add(module, full, primary and module is inner)
        for wrapper in wrappers:
            self._alias(wrapper)
        return self.by_id[id(root)]

    def name_root(self, module: torch.nn.Module) -> ModInfo:
        """Name a module whose forward started with no instrumented forward open."""
        inner = unwrap(module)
        if inner is not module and id(inner) in self.by_id:
            self._alias(module)  # torch.compile(model) of a model named before
            return self.by_id[id(module)]
        if self.primary is None or self.primary() is None:
            return self.name_tree(module, "", primary=True)
        cls = type(inner).__name__
        self._root_classes[cls] += 1
        count = self._root_classes[cls]
        return self.name_tree(module, f"@{cls}" if count == 1 else f"@{cls}#{count}", False)

    def name_nested(self, module: torch.nn.Module, caller_path: str) -> ModInfo:
        """Name a module called inside a forward but not part of any named tree."""
        tag = f"~{type(module).__name__}"
        return self.name_tree(module, f"{caller_path}.{tag}" if caller_path else tag, False)

    def path_of(self, module: Any) -> str:
        """Path of a named module ("" when unknown)."""
        info = self.by_id.get(id(module))
        return info.path if info is not None else ""

    def clear(self) -> None:
        """Forget every name."""
        self.by_id.clear()
        self.primary = None
        self.inplace = False
        self.wrappers.clear()
        self._alias_refs.clear()
        self._root_classes.clear()

    def _alias(self, wrapper: torch.nn.Module) -> None:
        """Give a compiled wrapper the name of the module it wraps (dropped with the wrapper)."""
        key = id(wrapper)
        if key in self.by_id:
            return
        info = self.by_id.get(id(unwrap(wrapper)))
        if info is None:
            return
        by_id, refs = self.by_id, self._alias_refs

        def forget(ref: weakref.ref, key: int = key, info: ModInfo = info) -> None:
            if by_id.get(key) is info:
                del by_id[key]
            refs.pop(key, None)

        refs[key] = weakref.ref(wrapper, forget)
        by_id[key] = info
        if info.root:  # the wrapper is what the script calls: its hooks drive the forward phase
            self.primary = weakref.ref(wrapper)
        self.wrappers.append(wrapper)

    def _add(self, module: torch.nn.Module, path: str, root: bool) -> None:
        key = id(module)
        by_id = self.by_id

        def forget(ref: weakref.ref, key: int = key) -> None:
            info = by_id.get(key)
            if info is not None and info.ref is ref:
                del by_id[key]

        cls = type(module).__name__
        payload = self._stacks.payload
        self.inplace = self.inplace or is_inplace(module)
        self.by_id[key] = ModInfo(
            fwd=payload(module_range("forward", path, cls)),
            bwd=payload(module_range("backward", path, cls)),
            path=path,
            ref=weakref.ref(module, forget),
            root=root,
        )


def strip_wrapper_segments(path: str) -> str:
    """`blocks.0._orig_mod.ln` -> `blocks.0.ln`: compiled wrappers add no path segment."""
    if "_orig_mod" not in path:
        return path
    return ".".join(part for part in path.split(".") if part != "_orig_mod")


def is_inplace(module: torch.nn.Module) -> bool:
    """True for modules built with `inplace=True` (nn.ReLU(inplace=True), ...)."""
    return getattr(module, "inplace", False) is True


def is_descendant(path: str, ancestor: str) -> bool:
    """True when `path` lies strictly below `ancestor` in the module tree ("" is the top)."""
    return path != ancestor and (ancestor == "" or path.startswith(ancestor + "."))
