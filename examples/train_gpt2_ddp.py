"""Train a randomly initialised GPT-2 with DistributedDataParallel, one process per rank.

A plain PyTorch DDP loop, written as a user would write it: nothing here
knows about profiling. Every rank trains the same tiny GPT-2 (the `tiny`
size of train_gpt2.py) on its own shard of synthetic tokens; gradients are
averaged across ranks by DDP. On a machine without GPUs it runs on the CPU
with the gloo backend, one rank per process; with GPUs, NCCL and one GPU per
rank. Start the ranks with torchrun, or let the script spawn them:

    torchrun --nproc-per-node 2 examples/train_gpt2_ddp.py --steps 4
    python examples/train_gpt2_ddp.py --spawn 2 --steps 4

and profile each rank with nsysmap in any of these ways (docs/run.md):

    nsysmap run --nproc-per-node 2 examples/train_gpt2_ddp.py -- --steps 4
    torchrun --nproc-per-node 2 -m nsysmap run examples/train_gpt2_ddp.py -- --steps 4
    nsysmap run examples/train_gpt2_ddp.py -- --spawn 2 --steps 4

`--slow-rank R` makes rank R do extra matrix work in its forward pass (a
straggler, for trying out the cross-rank tables); `--die-rank R --die-step S`
makes rank R kill itself with SIGKILL at step S (a rank lost mid-run).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_gpt2 import DEFAULT_SEQ_LEN, SIZES, build_model


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--batch", type=int, default=2, help="per rank")
    parser.add_argument("--seq-len", type=int, default=None, help="default: 64 tiny, 1024 small")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--spawn", type=int, metavar="N", help="start N ranks with mp.spawn")
    parser.add_argument("--slow-rank", type=int, metavar="R", help="rank R computes more")
    parser.add_argument("--die-rank", type=int, metavar="R", help="rank R is killed (SIGKILL)")
    parser.add_argument("--die-step", type=int, default=2, metavar="S")
    return parser.parse_args(argv)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Straggle(torch.nn.Module):
    """Extra matrix work on the slow rank: its forward takes longer, its output is unchanged."""

    def __init__(self, extra: int) -> None:
        super().__init__()
        self.extra = extra

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        square = torch.ones(256, 256, device=hidden.device)
        for _ in range(self.extra):
            square = torch.tanh(square @ square / 256)
        return hidden + 0 * square.mean()


def train(rank: int, world_size: int, args: argparse.Namespace) -> None:
    """One rank: join the process group, train, leave."""
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world_size)
    device = torch.device(f"cuda:{rank % torch.cuda.device_count()}" if cuda else "cpu")
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts them)
    model = build_model(args.size, "sdpa", device)
    if args.slow_rank == rank:
        model.transformer.h[0].mlp.register_module("straggle", Straggle(extra=12))
        model.transformer.h[0].mlp.register_forward_hook(
            lambda module, _args, out: module.straggle(out)
        )
    ddp = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=args.lr)
    seq_len = args.seq_len or DEFAULT_SEQ_LEN[args.size]
    generator = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard
    vocab = SIZES[args.size]["vocab_size"]
    ddp.train()
    for step in range(args.steps):
        if args.die_rank == rank and step == args.die_step:
            os.kill(os.getpid(), signal.SIGKILL)
        start = time.perf_counter()
        tokens = torch.randint(0, vocab, (args.batch, seq_len), generator=generator).to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = ddp(tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        if rank == 0:
            took = (time.perf_counter() - start) * 1e3
            print(f"step {step}: loss {loss.item():.4f} ({took:.0f} ms on rank 0)", flush=True)
    # Leave once every rank is done, DDP's reducer released first: a rank that destroys its
    # gloo group while another still talks to it can hang there (pytorch/pytorch#75097).
    del ddp, optimizer, loss
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.spawn:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        mp.spawn(train, args=(args.spawn, args), nprocs=args.spawn)
        return
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if rank == 0:
        print(f"GPT-2 {args.size} under DDP: {world_size} ranks, batch {args.batch} per rank")
    train(rank, world_size, args)


if __name__ == "__main__":
    main()
