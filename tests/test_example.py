"""examples/train_gpt2.py: runs plainly, and end to end under the launcher."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path

import pytest
import torch

import instrument
from instrument import launch

pytestmark = pytest.mark.slow  # the example trains

EXAMPLE = Path(__file__).parents[1] / "examples" / "train_gpt2.py"
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("train_gpt2_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def losses(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"^step \d+: loss (\S+)", text, flags=re.M)]


def test_training_prints_one_loss_per_step_starting_near_ln_vocab(example, capsys):
    example.main(["--steps", "3", "--attn", "eager"])
    values = losses(capsys.readouterr().out)
    assert len(values) == 3
    # Random init (std 0.02) gives near-uniform logits: cross-entropy ~ ln(vocabulary).
    assert abs(values[0] - math.log(example.SIZES["tiny"]["vocab_size"])) < 0.1


@pytest.mark.parametrize(
    ("choice", "implementation"),
    [
        ("per-parameter", {"foreach": False}),
        ("foreach", {"foreach": True}),
        ("fused", {"fused": True}),
    ],
)
def test_optimizer_option_picks_adamws_implementation(
    example, capsys, monkeypatch, choice, implementation
):
    made = []
    adamw = torch.optim.AdamW

    def recording(params, **kwargs):
        made.append(kwargs)
        return adamw(params, **kwargs)

    monkeypatch.setattr(torch.optim, "AdamW", recording)
    example.main(["--steps", "1", "--optimizer", choice])
    example.main(["--steps", "1"])  # without the option: PyTorch's own choice, as before
    assert made == [{"lr": 3e-4, **implementation}, {"lr": 3e-4}]
    assert f"AdamW {choice}" in capsys.readouterr().out


def test_inference_runs_forward_only(example, capsys):
    example.main(["--inference", "--steps", "2", "--seed", "1"])
    assert len(losses(capsys.readouterr().out)) == 2


def test_small_is_gpt2_124m(example):
    model = example.build_model("small", "sdpa", torch.device("cpu"))
    config = model.config
    assert (config.n_layer, config.n_head, config.n_embd) == (12, 12, 768)
    assert (config.n_positions, config.vocab_size) == (1024, 50257)
    assert sum(p.numel() for p in model.parameters()) == 124_439_808  # published GPT-2 small


def test_the_model_names_a_loss_transformers_knows(example):
    """Otherwise transformers warns `loss_type=None ... unrecognized` on every run (make demo)."""
    from transformers.loss.loss_utils import LOSS_MAPPING

    model = example.build_model("tiny", "sdpa", torch.device("cpu"))
    assert model.loss_type in LOSS_MAPPING


@pytest.mark.slow
def test_example_under_the_torch_launcher(tmp_path):
    out = tmp_path / "out"
    status = launch.main(["--backend", "torch", "--out", str(out), str(EXAMPLE), "--steps", "5"])
    assert status == 0 and instrument.active() is None
    record = json.loads((out / "launch.json").read_text())
    assert (record["steps_seen"], record["profiled_steps"]) == (5, [1, 3])
    events = json.loads((out / "trace.json").read_text())["traceEvents"]
    names = {e["name"] for e in events if e.get("name", "").startswith("nsysmap:")}
    for layer in range(2):
        for direction in ("fwd", "bwd"):
            assert f"nsysmap:{direction}:Conv1D:transformer.h.{layer}.attn.c_attn" in names
    assert {f"nsysmap:phase:{p}" for p in ("data", "forward", "loss", "backward")} <= names
