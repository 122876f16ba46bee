"""Record a torch.profiler trace of GPT-2 training the way many users do, without nsysmap.

`with_modules=True`, `with_stack=True` (without it PyTorch records no module
frames) and `record_shapes=True`, a `schedule` with a warm-up, one
`ProfilerStep#N` per step, Chrome trace JSON out. nsysmap has nothing to do with
the recording: the trace is what `nsysmap attribute TRACE` gets from people who
profile their own scripts. On a GPU it also holds the kernels, their launches and
the autograd thread's backward operators.

    python examples/profile_with_modules.py --out trace.json.gz --size tiny --steps 3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_gpt2 import SIZES, fixed_batch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="trace file (.json or .json.gz)")
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=None)
    parser.add_argument("--steps", type=int, default=3, help="profiled steps")
    parser.add_argument("--warmup", type=int, default=2, help="steps before profiling")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--inference", action="store_true", help="forward only")
    parser.add_argument(
        "--no-stack",
        dest="with_stack",
        action="store_false",
        help="leave with_stack off (PyTorch then writes no module frames, only the flag)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device, model, tokens, optimizer = fixed_batch(args.size, args.batch, args.seq_len, args.device)
    activities = [ProfilerActivity.CPU]
    activities += [ProfilerActivity.CUDA] if device.type == "cuda" else []
    plan = schedule(wait=0, warmup=args.warmup, active=args.steps, repeat=1)
    with profile(
        activities=activities,
        schedule=plan,
        record_shapes=True,
        with_modules=True,
        with_stack=args.with_stack,
    ) as prof:
        for _ in range(args.warmup + args.steps):
            if args.inference:
                with torch.no_grad():
                    model(tokens)
            else:
                optimizer.zero_grad(set_to_none=True)
                model(tokens, labels=tokens).loss.backward()
                optimizer.step()
            prof.step()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(args.out))
    print(f"trace: {args.out}")


if __name__ == "__main__":
    main()
