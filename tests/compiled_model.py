"""A small training script for the torch.compile tests (run as a script, not collected).

    python tests/compiled_model.py --out result.json [--compile] [--steps N] [--variant V]
        [--grow-at K] [--device cuda] [--mode reduce-overhead]

Three blocks of LayerNorm, Linear, GELU, Linear and a head, AdamW, MSE loss
outside the model. Writes to --out the loss of every step as float.hex (so
runs compare bitwise; one thread, so that no reduction depends on how
busy the machine is) and what Dynamo did: graphs, graph breaks and the
number of frames it compiled (a recompile is one more; a backward that
AOTAutograd compiles lazily on a cache miss is not counted). Variants: `whole`
(`torch.compile(model)`), `blocks` (each block compiled), `inplace`
(`model.compile()`), `break` (a graph break inside every block). From step
K on (--grow-at), the batch is twice as large: torch.compile recompiles.
"""

from __future__ import annotations

import argparse
import json

import torch
from torch import nn

WIDTH, BLOCKS, BATCH = 16, 3, 8


class Block(nn.Module):
    def __init__(self, graph_break: bool = False) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(WIDTH)
        self.fc1 = nn.Linear(WIDTH, 2 * WIDTH)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * WIDTH, WIDTH)
        self.graph_break = graph_break

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(self.ln(x)))
        if self.graph_break:
            torch._dynamo.graph_break()
        return x + self.fc2(h)


class Net(nn.Module):
    def __init__(self, graph_break: bool = False) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(Block(graph_break) for _ in range(BLOCKS)))
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))


def compiled(model: Net, variant: str, mode: str | None) -> nn.Module:
    if variant == "blocks":
        for i, block in enumerate(model.blocks):
            model.blocks[i] = torch.compile(block, mode=mode)
        return model
    if variant == "inplace":
        model.compile(mode=mode)
        return model
    return torch.compile(model, mode=mode)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--variant", default="whole")
    parser.add_argument("--grow-at", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--mode", default=None, help="torch.compile mode (reduce-overhead)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Net(graph_break=args.variant == "break").to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    run = compiled(model, args.variant, args.mode) if args.compile else model
    compilations = []
    if args.compile:
        import torch._dynamo as dynamo
        from torch._dynamo.callback import CallbackTrigger

        def started(args: object) -> None:
            if getattr(args, "callback_trigger", None) == CallbackTrigger.DYNAMO:
                compilations.append(args)

        dynamo.callback_handler.register_start_callback(started)
    x = torch.randn(2 * BATCH, WIDTH, device=args.device)
    y = torch.randn(2 * BATCH, 1, device=args.device)
    losses = []
    for step in range(args.steps):
        rows = 2 * BATCH if args.grow_at is not None and step >= args.grow_at else BATCH
        opt.zero_grad()
        loss = nn.functional.mse_loss(run(x[:rows]), y[:rows])
        loss.backward()
        opt.step()
        losses.append(loss.item().hex())
    result: dict[str, object] = {"losses": losses}
    if args.compile:
        from torch._dynamo.utils import counters

        result["dynamo"] = {
            "graphs": counters["stats"]["unique_graphs"],
            "graph_breaks": sum(counters["graph_break"].values()),
            "compilations": len(compilations),
        }
    with open(args.out, "w") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main()
