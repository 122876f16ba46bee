"""Train (or run) a randomly initialised GPT-2 on synthetic tokens.

A plain PyTorch + Hugging Face training loop, written as a user would write
it: nothing here knows about profiling. Profile it with

    nsysmap run --output out/gpt2 examples/train_gpt2.py -- --steps 4

`--size tiny` (default) runs a few steps on a laptop CPU in seconds;
`--size small` is GPT-2 124M (12 layers, 12 heads, 768 wide, context 1024,
vocabulary 50257). No weights or tokenizer are downloaded. `--compile`
trains `torch.compile(model)` (`--compile-mode reduce-overhead` for CUDA graphs).
`--optimizer` picks AdamW's implementation: `default` (PyTorch's choice: one
kernel per operation and parameter on the CPU, the foreach one on CUDA),
`per-parameter` (`foreach=False`), `foreach` (`foreach=True`) or `fused`
(`fused=True`); `--tf32` lets fp32 matmuls run as TF32 on tensor cores.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from torch.utils.data import DataLoader, Dataset
from transformers import GPT2Config, GPT2LMHeadModel

SIZES = {
    "tiny": {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 128, "vocab_size": 512},
    "small": {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024, "vocab_size": 50257},
}
DEFAULT_SEQ_LEN = {"tiny": 64, "small": 1024}
# AdamW's implementations, by --optimizer: the keyword arguments each passes.
OPTIMIZERS: dict[str, dict[str, bool]] = {
    "default": {},
    "per-parameter": {"foreach": False},
    "foreach": {"foreach": True},
    "fused": {"fused": True},
}


class RandomTokens(Dataset):
    """`length` sequences of random token ids, the same for a given seed."""

    def __init__(self, length: int, seq_len: int, vocab_size: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(0, vocab_size, (length, seq_len), generator=generator)

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.tokens[index]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=None, help="default: 64 tiny, 1024 small")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--attn", choices=("eager", "sdpa"), default="sdpa")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument(
        "--optimizer",
        choices=tuple(OPTIMIZERS),
        default="default",
        help="AdamW's implementation: PyTorch's default, per-parameter (foreach=False), "
        "foreach=True or fused=True",
    )
    parser.add_argument(
        "--tf32",
        action="store_true",
        help="torch.backends.cuda.matmul.allow_tf32 = True (fp32 matmuls as TF32 on CUDA)",
    )
    parser.add_argument("--inference", action="store_true", help="forward only, no optimizer")
    parser.add_argument("--compile", action="store_true", help="model = torch.compile(model)")
    parser.add_argument(
        "--compile-mode",
        default=None,
        choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
        help="torch.compile mode (implies --compile; reduce-overhead uses CUDA graphs on CUDA)",
    )
    return parser.parse_args(argv)


def build_model(size: str, attn: str, device: torch.device) -> GPT2LMHeadModel:
    """A randomly initialised GPT-2 of the given size."""
    vocab = SIZES[size]["vocab_size"]
    config = GPT2Config(
        **SIZES[size], bos_token_id=vocab - 1, eos_token_id=vocab - 1, attn_implementation=attn
    )
    model = GPT2LMHeadModel(config)
    # transformers cannot tell this class's loss from its name and warns; it is causal LM.
    model.loss_type = "ForCausalLM"
    return model.to(device)


def fixed_batch(
    size: str, batch: int, seq_len: int | None, device_choice: str
) -> tuple[torch.device, GPT2LMHeadModel, torch.Tensor, torch.optim.Optimizer]:
    """Device, seeded model, one random batch and AdamW: the setup of repeated-step scripts."""
    cuda = torch.cuda.is_available() if device_choice == "auto" else device_choice == "cuda"
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)
    model = build_model(size, "sdpa", device)
    length = seq_len or DEFAULT_SEQ_LEN[size]
    tokens = torch.randint(0, SIZES[size]["vocab_size"], (batch, length), device=device)
    return device, model, tokens, torch.optim.AdamW(model.parameters(), lr=3e-4)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = torch.device(
        ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    )
    seq_len = args.seq_len or DEFAULT_SEQ_LEN[args.size]
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(args.seed)
    model = build_model(args.size, args.attn, device)
    compiled = args.compile or args.compile_mode is not None
    if compiled:
        model = torch.compile(model, mode=args.compile_mode)
    data = RandomTokens(args.batch * args.steps, seq_len, SIZES[args.size]["vocab_size"], args.seed)
    loader = DataLoader(data, batch_size=args.batch, shuffle=False)
    how = f", compiled ({args.compile_mode or 'default'})" if compiled else ""
    print(
        f"GPT-2 {args.size}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params, "
        f"batch {args.batch}x{seq_len}, {args.steps} steps on {device}, attention {args.attn}{how}"
        + (f", AdamW {args.optimizer}" if args.optimizer != "default" else "")
    )
    if args.inference:
        model.eval()
        with torch.no_grad():
            for step, tokens in enumerate(loader):
                tokens = tokens.to(device, non_blocking=True)
                loss = model(tokens, labels=tokens).loss
                print(f"step {step}: loss {loss.item():.4f}")
        return
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, **OPTIMIZERS[args.optimizer])
    for step, tokens in enumerate(loader):
        start = time.perf_counter()
        tokens = tokens.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = model(tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.4f} ({(time.perf_counter() - start) * 1e3:.0f} ms)")


if __name__ == "__main__":
    main()
