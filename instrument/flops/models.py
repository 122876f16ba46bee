"""Models for instrument/flops/: GPT-2 presets, config JSON, `module:callable` factories.

Every builder returns a factory (a callable with no arguments returning an
`nn.Module`); instrument/flops/fake_run.py calls it under FakeTensorMode, so no
parameter is ever allocated. Weights are never downloaded (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

Factory = Callable[[], torch.nn.Module]

# (n_layer, n_head, n_embd); context 1024 and vocabulary 50,257 for all.
GPT2_SIZES = {
    "tiny": (2, 2, 128),
    "small": (12, 12, 768),
    "medium": (24, 16, 1024),
    "large": (36, 20, 1280),
    "xl": (48, 25, 1600),
}
ATTENTION = ("sdpa", "eager")


class SpecError(ValueError):
    """The model or input description cannot be used (one line, for the user)."""


def gpt2_factory(
    size: str, *, vocab: int | None = None, attn: str = "sdpa", dropout: float = 0.0
) -> Factory:
    """A GPT2LMHeadModel of a preset size. Dropout defaults to 0 (pretraining practice)."""
    if size not in GPT2_SIZES:
        raise SpecError(f"unknown GPT-2 size {size!r}; expected one of {sorted(GPT2_SIZES)}")
    n_layer, n_head, n_embd = GPT2_SIZES[size]
    fields: dict[str, Any] = {"n_layer": n_layer, "n_head": n_head, "n_embd": n_embd}
    fields.update(resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout)
    return config_factory(fields, vocab=vocab, attn=attn)


def config_factory(
    config: dict[str, Any] | str, *, vocab: int | None = None, attn: str = "sdpa"
) -> Factory:
    """A causal LM from a Hugging Face config: a dict, inline JSON or a JSON file.

    Without a "model_type" key the config is a GPT2Config.
    """
    fields = dict(_load_json(config) if isinstance(config, str) else config)
    if vocab is not None:
        fields["vocab_size"] = vocab
    if attn not in ATTENTION:
        raise SpecError(f"unknown attention implementation {attn!r}; expected {ATTENTION}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    model_type = fields.pop("model_type", "gpt2")
    try:
        cfg = transformers.AutoConfig.for_model(model_type, **fields)
    except (ValueError, TypeError) as exc:
        raise SpecError(f"bad model config: {exc}") from exc
    cfg._attn_implementation = attn

    def build() -> torch.nn.Module:
        return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)

    build.config = cfg  # type: ignore[attr-defined]
    return build


def _load_json(text: str) -> dict[str, Any]:
    source = text
    if not text.lstrip().startswith("{"):
        path = Path(text)
        if not path.is_file():
            raise SpecError(f"config {text!r} is neither inline JSON nor a file")
        source = path.read_text()
    try:
        value = json.loads(source)
    except json.JSONDecodeError as exc:
        raise SpecError(f"config is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise SpecError("config JSON must be an object")
    return value


def import_factory(spec: str) -> Factory:
    """`package.module:callable` -> the callable (it must return an nn.Module)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SpecError(f"factory {spec!r} is not of the form module:callable")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(f"cannot import factory module {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        if not hasattr(target, part):
            raise SpecError(f"module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise SpecError(f"factory {spec!r} is not callable")
    return target


def max_positions(factory: Factory) -> int | None:
    """The context length a config-built model supports, when known."""
    config = getattr(factory, "config", None)
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
