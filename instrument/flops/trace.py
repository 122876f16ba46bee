"""Record every aten operator of a forward and backward, keyed by innermost module.

Forward: global module hooks keep a stack of the modules being run; an
operator belongs to the top of the stack. Backward: the autograd engine runs
nodes, not modules, so the hooks also note the autograd sequence number at
every module entry and exit. A node carries the sequence number it got when
the forward created it, which places it between two marks and so inside the
module that was innermost then:

    forward   seq 0..3        4..9              10..11      12..
              [transformer.h.0.attn | ...c_proj | attn ]    (root exit)
    backward  node seq 7  ->  transformer.h.0.attn.c_proj

Ops of nodes created outside every module (the backward seed, gradient
accumulation into leaves) have no module.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from typing import Any

import torch
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)
from torch.utils._python_dispatch import TorchDispatchMode

from instrument.flops.ops import op_flops, op_name, shapes_text

Owner = tuple[str, str] | None  # (module path, module class); None outside modules
RowKey = tuple[Owner, str, str, str, str, str]  # owner, direction, op, part, kind, shapes


class ModuleClock:
    """Innermost module now, and innermost module when an autograd node was made."""

    def __init__(self, model: torch.nn.Module) -> None:
        self._names = {id(m): (path, type(m).__name__) for path, m in model.named_modules()}
        self._stack: list[tuple[str, str]] = []
        self._marks: list[int] = []  # autograd sequence number at each entry / exit
        self._owners: list[Owner] = []
        self._handles: list[Any] = []

    def __enter__(self) -> ModuleClock:
        self._handles = [
            register_module_forward_pre_hook(self._enter),
            register_module_forward_hook(self._exit, always_call=True),
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()

    def _enter(self, module: torch.nn.Module, args: Any) -> None:
        owner = self._names.get(id(module))
        if owner is not None:
            self._stack.append(owner)
            self._mark()

    def _exit(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if id(module) in self._names and self._stack:
            self._stack.pop()
            self._mark()

    def _mark(self) -> None:
        self._marks.append(torch._C._autograd._get_sequence_nr())
        self._owners.append(self.current())

    def current(self) -> Owner:
        """The module whose forward is running now, innermost first."""
        return self._stack[-1] if self._stack else None

    def owner_of(self, sequence_nr: int) -> Owner:
        """The innermost module when the node with this sequence number was created."""
        index = bisect_right(self._marks, sequence_nr) - 1
        return self._owners[index] if index >= 0 else None


class OpRecorder(TorchDispatchMode):
    """Aggregates calls, matmul FLOPs and estimated FLOPs per row key."""

    def __init__(self, clock: ModuleClock) -> None:
        super().__init__()
        self.clock = clock
        self.direction = "forward"
        self.rows: dict[RowKey, list[int]] = defaultdict(lambda: [0, 0, 0])

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.namespace != "prim":
            self._record(func, args, kwargs, out)
        return out

    def _record(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        node = torch._C._current_autograd_node()
        if node is not None:
            owner = self.clock.owner_of(node._sequence_nr())
        else:
            owner = self.clock.current() if self.direction == "forward" else None
        flops = op_flops(func, args, kwargs, out)
        shapes = shapes_text(args)
        for index, (part, matmul) in enumerate(flops.parts):
            row = self.rows[(owner, self.direction, op_name(func), part, flops.kind, shapes)]
            row[0] += 1
            row[1] += matmul
            row[2] += flops.other if index == 0 else 0


def row_dicts(rows: dict[RowKey, list[int]], order: dict[str, int]) -> list[dict[str, Any]]:
    """JSON rows, in module order (named_modules), forward before backward."""
    out = []
    for (owner, direction, op, part, kind, shapes), (calls, matmul, other) in rows.items():
        out.append(
            {
                "module": None if owner is None else owner[0],
                "module_class": None if owner is None else owner[1],
                "direction": direction,
                "op": op,
                "part": part,
                "kind": kind,
                "input_shapes": shapes,
                "calls": calls,
                "matmul_flop": matmul,
                "other_flop_estimate": other,
            }
        )

    def sort_key(row: dict[str, Any]) -> tuple[Any, ...]:
        position = order.get(row["module"], len(order)) if row["module"] is not None else 1 << 30
        return (row["direction"] != "forward", position, row["op"], row["part"])

    return sorted(out, key=sort_key)
