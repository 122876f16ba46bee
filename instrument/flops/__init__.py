"""Count FLOPs and record operator shapes per module, without running the model.

    python -m instrument.flops --gpt2 small --batch 1 --seq 1024 --json

The model is built and run on fake tensors (no storage, no kernels) and every
aten operator is recorded under the innermost module that ran it, forward and
backward apart: calls, input shapes, exact matmul-class FLOPs and an estimate
for the rest. Module paths are those of `named_modules()` ("" is the root), as
in instrument/ranges/naming.py, so that FLOPs join with measured time by module.
`nsysmap flops` runs this module in a subprocess and renders its JSON; the
document is described in docs/flops.md.

This module imports torch only when it counts, so that a missing torch is
reported as one line with exit status 3.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

EXIT_USAGE = 2  # argparse's own status
EXIT_MISSING = 3  # torch (or transformers, for --gpt2/--config) cannot be imported
EXIT_SPEC = 4  # bad factory, config or input description
EXIT_FAILED = 5  # the model raised while running on fake tensors


def count_flops(
    model: Any,
    batch: int = 1,
    seq: int = 1024,
    *,
    input_shape: tuple[int, ...] | None = None,
    input_dtype: str = "int64",
    backward: bool = True,
    logits: str = "all",
) -> dict[str, Any]:
    """Count one forward (and backward) of `model` on a [batch, seq] input.

    `model` is a factory (called on fake tensors, so it allocates nothing) or
    an nn.Module on the meta device. `input_shape` replaces (batch, seq);
    `logits="last"` passes logits_to_keep=1 (LM head on the last position).
    Returns the JSON-serialisable document described in docs/flops.md.
    """
    import torch

    from instrument.flops.fake_run import count
    from instrument.flops.models import SpecError

    dtype = getattr(torch, input_dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise SpecError(f"unknown input dtype {input_dtype!r}")
    shape = tuple(input_shape) if input_shape is not None else (batch, seq)
    if not shape or any(n <= 0 for n in shape):
        raise SpecError(f"input shape must be positive sizes, got {list(shape)}")
    return count(model, shape, input_dtype=dtype, backward=backward, logits=logits)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m instrument.flops", description=__doc__)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--gpt2", metavar="SIZE", help="tiny, small, medium, large or xl")
    which.add_argument("--config", metavar="JSON", help="HF config: inline JSON or a file")
    which.add_argument("--factory", metavar="MODULE:CALLABLE", help="returns an nn.Module")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--input-shape", help="comma-separated sizes, instead of batch,seq")
    parser.add_argument("--input-dtype", default="int64", help="int64 (token ids), float32, ...")
    parser.add_argument("--vocab", type=int, help="vocabulary size (--gpt2, --config)")
    parser.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    parser.add_argument("--dropout", type=float, default=0.0, help="GPT-2 presets only")
    parser.add_argument("--logits", default="all", choices=["all", "last"])
    parser.add_argument("--no-backward", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the JSON document")
    return parser


def _factory(args: argparse.Namespace) -> tuple[Any, str]:
    from instrument.flops import models

    if args.gpt2:
        factory = models.gpt2_factory(
            args.gpt2, vocab=args.vocab, attn=args.attn, dropout=args.dropout
        )
        label = f"gpt2-{args.gpt2}"
    elif args.config:
        factory = models.config_factory(args.config, vocab=args.vocab, attn=args.attn)
        label = "config"
    else:
        factory, label = models.import_factory(args.factory), args.factory
    limit = models.max_positions(factory)
    if limit is not None and args.seq > limit and not args.input_shape:
        raise models.SpecError(f"--seq {args.seq} is longer than the model's context {limit}")
    return factory, label


def _run(args: argparse.Namespace) -> dict[str, Any]:
    factory, label = _factory(args)
    shape = None
    if args.input_shape:
        try:
            shape = tuple(int(n) for n in args.input_shape.split(","))
        except ValueError as exc:
            from instrument.flops.models import SpecError

            raise SpecError(f"--input-shape {args.input_shape!r} is not sizes") from exc
    doc = count_flops(
        factory,
        args.batch,
        args.seq,
        input_shape=shape,
        input_dtype=args.input_dtype,
        backward=not args.no_backward,
        logits=args.logits,
    )
    return {"model": label, **doc}


def _summary(doc: dict[str, Any]) -> str:
    """A few lines for a terminal; `nsysmap flops` renders the full table."""
    lines = [f"{doc['model']} ({doc['model_class']}), input {doc['input_shape']}"]
    for direction in ("forward", "backward"):
        rows = [r for r in doc["rows"] if r["direction"] == direction]
        if rows:
            matmul = sum(r["matmul_flop"] for r in rows)
            other = sum(r["other_flop_estimate"] for r in rows)
            lines.append(f"{direction}: matmul {matmul:,} FLOP, other ~{other:,} FLOP (estimate)")
    return "\n".join(lines)


def _fail(status: int, message: str) -> int:
    first = (message.strip().splitlines() or [""])[0]
    print(f"instrument.flops: error: {first}", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    """Command-line entry; returns the exit status (documented in docs/flops.md)."""
    args = _parser().parse_args(argv)
    try:
        import torch  # noqa: F401

        from instrument.flops.models import SpecError
    except ModuleNotFoundError as exc:
        return _fail(EXIT_MISSING, f"{exc.name} is not installed for {sys.executable}")
    try:
        doc = _run(args)
    except SpecError as exc:
        return _fail(EXIT_SPEC, str(exc))
    except ModuleNotFoundError as exc:
        return _fail(EXIT_MISSING, f"{exc.name} is not installed for {sys.executable}")
    except Exception as exc:  # the user's model failed on fake tensors
        return _fail(EXIT_FAILED, f"counting failed: {type(exc).__name__}: {exc}")
    print(json.dumps(doc) if args.json else _summary(doc))
    return 0
