"""instrument/ on a tiny Hugging Face GPT-2: every module's ranges, the traps, numerics."""

from __future__ import annotations

import os
import threading

import pytest
import torch

import instrument
from instrument.ranges import naming
from instrument.ranges.session import annotate
from tests.test_instrument_support import Recorder

pytestmark = pytest.mark.torch  # imports torch (the training side)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

VOCAB, SEQ, BATCH = 64, 16, 2


def tiny_gpt2(attn: str = "sdpa", seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        n_layer=2,
        n_head=2,
        n_embd=32,
        n_positions=SEQ,
        vocab_size=VOCAB,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation=attn,
    )
    return transformers.GPT2LMHeadModel(config)


def batches(n: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    return [torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator) for _ in range(n)]


def train(model: torch.nn.Module, steps: int) -> tuple[list[float], torch.optim.Optimizer]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for tokens in batches(steps):
        optimizer.zero_grad()
        loss = model(tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, optimizer


@pytest.fixture(autouse=True)
def no_session_left():
    yield
    leaked = instrument.active() is not None
    while instrument.active() is not None:
        instrument.uninstall()
    assert not leaked


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_every_gpt2_module_has_its_ranges_on_the_right_thread(attn):
    model = tiny_gpt2(attn)
    rec = Recorder()
    with annotate(model, emit=rec):
        train(model, steps=1)
    assert rec.violations == [] and rec.open_ranges() == []
    ranges = rec.ranges()
    here = threading.get_ident()
    fwd_names = {r.name for r in ranges if r.name.startswith("nsysmap:fwd:")}
    bwd_names = {r.name for r in ranges if r.name.startswith("nsysmap:bwd:")}
    assert {r.thread for r in ranges} == {here}  # CPU: backward hooks run on the caller
    kinds = ("Conv1D", "Linear", "LayerNorm", "Embedding", "GPT2Attention", "GPT2MLP", "GPT2Block")
    expected = 0
    for path, module in model.named_modules():
        cls = type(module).__name__
        if cls == "ModuleList" or path.endswith("attn_dropout"):
            continue  # a container; a Dropout whose p HF applies functionally
        assert naming.module_range("forward", path, cls) in fwd_names, path
        has_backward = naming.module_range("backward", path, cls) in bwd_names
        # Trap (a): modules returning a ModelOutput get no backward range.
        assert has_backward == (cls not in ("GPT2LMHeadModel", "GPT2Model")), path
        expected += cls in kinds
    # 2 blocks x (block, attn, mlp, 2 LayerNorm, 4 Conv1D) + wte, wpe, ln_f, lm_head
    assert expected == 2 * 9 + 4


def test_gpt2_ranges_nest_like_the_model():
    model = tiny_gpt2()
    rec = Recorder()
    with annotate(model, emit=rec):
        train(model, steps=1)
    parent = {r.name: r.parent for r in rec.ranges()}
    f = lambda p, c: naming.module_range("forward", p, c)  # noqa: E731
    b = lambda p, c: naming.module_range("backward", p, c)  # noqa: E731
    assert parent[f("transformer.h.1.attn.c_attn", "Conv1D")] == f(
        "transformer.h.1.attn", "GPT2Attention"
    )
    assert parent[f("transformer.h.1.attn", "GPT2Attention")] == f("transformer.h.1", "GPT2Block")
    assert parent[f("transformer.h.1", "GPT2Block")] == f("transformer", "GPT2Model")
    assert parent[b("transformer.h.0.mlp.c_fc", "Conv1D")] == b("transformer.h.0.mlp", "GPT2MLP")
    assert parent[b("transformer.h.0", "GPT2Block")] == naming.phase_range("backward")
    assert parent[b("lm_head", "Linear")] == naming.phase_range("backward")
    # HF computes the loss inside forward: a loss phase nested in the root's forward range,
    # then the loss tail between the end of forward and backward.
    loss_parents = [r.parent for r in rec.ranges() if r.name == naming.phase_range("loss")]
    assert loss_parents == [f("", "GPT2LMHeadModel"), naming.step_range(0)]


def test_gpt2_embedding_backward_ranges_hold_their_weight_gradients():
    model = tiny_gpt2()
    assert model.lm_head.weight is model.transformer.wte.weight  # tied
    rec = Recorder()
    model.transformer.wte.weight.register_hook(lambda g: rec.mark("wte"))
    model.transformer.wpe.weight.register_hook(lambda g: rec.mark("wpe"))
    with annotate(model, emit=rec):
        train(model, steps=1)
    ranges = rec.ranges()
    for label in ("wte", "wpe"):
        name = naming.module_range("backward", f"transformer.{label}", "Embedding")
        (embedding,) = [r for r in ranges if r.name == name]
        (mark,) = rec.marks(label)
        assert embedding.contains(mark), label


def test_loss_is_bitwise_identical_with_and_without_instrumentation():
    plain_model = tiny_gpt2(seed=3)
    plain, _ = train(plain_model, steps=3)
    rec = Recorder()
    instrumented_model = tiny_gpt2(seed=3)
    with annotate(instrumented_model, emit=rec):
        instrumented, _ = train(instrumented_model, steps=3)
    assert len(rec.ranges()) > 100  # the hooks really ran
    assert plain == instrumented
    assert len(set(plain)) == 3  # the model trained: losses moved
    for p, q in zip(plain_model.parameters(), instrumented_model.parameters(), strict=True):
        assert torch.equal(p, q)
