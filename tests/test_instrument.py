"""instrument/ on small hand-made models: ranges, threads, nesting, steps, phases, safety."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import instrument
from instrument.ranges import naming
from instrument.ranges.session import annotate
from tests.test_instrument_support import FailBackward, Recorder

pytestmark = pytest.mark.torch  # imports torch (the training side)

VOCAB, WIDTH = 16, 8


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin1 = nn.Linear(WIDTH, WIDTH)
        self.act = nn.ReLU()
        self.lin2 = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return x + self.lin2(self.act(self.lin1(x)))


class Net(nn.Module):
    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(layers))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, ids, labels=None):
        h = self.emb(ids)
        for block in self.blocks:
            h = block(h)
        logits = self.head(self.norm(h))
        if labels is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def loader(batches: int = 3) -> DataLoader:
    data = torch.randint(0, VOCAB, (2 * batches, 5), generator=torch.Generator().manual_seed(1))
    return DataLoader(TensorDataset(data), batch_size=2)


def train(model: nn.Module, opt: torch.optim.Optimizer, batches: int = 3) -> list[float]:
    losses = []
    for (ids,) in loader(batches):
        opt.zero_grad()
        loss = F.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def fwd(path: str, cls: str) -> str:
    return naming.module_range("forward", path, cls)


def bwd(path: str, cls: str) -> str:
    return naming.module_range("backward", path, cls)


def children(ranges, parent):
    return [
        r.name
        for r in ranges
        if r.thread == parent.thread and r.parent == parent.name and parent.contains(r.begin)
    ]


@pytest.fixture(autouse=True)
def no_session_left():
    torch.manual_seed(0)
    yield
    leaked = instrument.active() is not None
    while instrument.active() is not None:
        instrument.uninstall()
    assert not leaked, "a test left the instrumentation installed"


def test_every_module_gets_forward_and_backward_ranges_on_its_thread():
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder()
    with annotate(model, opt, emit=rec):
        train(model, opt, batches=1)
    assert rec.violations == []
    assert rec.open_ranges() == []
    ranges = rec.ranges()
    here = threading.get_ident()
    for path, module in model.named_modules():
        if isinstance(module, nn.ModuleList):  # a container, never called
            continue
        cls = type(module).__name__
        f = [r for r in ranges if r.name == fwd(path, cls)]
        b = [r for r in ranges if r.name == bwd(path, cls)]
        assert len(f) == 1 and f[0].thread == here, path
        # On CPU the autograd engine runs backward, hooks included, on the calling thread.
        assert len(b) == 1 and b[0].thread == here, path
    by_name = {r.name: r for r in ranges}
    assert by_name[fwd("blocks.1.lin2", "Linear")].parent == fwd("blocks.1", "Block")
    assert by_name[fwd("blocks.1", "Block")].parent == fwd("", "Net")
    assert by_name[fwd("", "Net")].parent == naming.phase_range("forward")
    assert by_name[bwd("blocks.0.lin1", "Linear")].parent == bwd("blocks.0", "Block")
    assert by_name[bwd("blocks.0", "Block")].parent == bwd("", "Net")
    assert by_name[bwd("", "Net")].parent == naming.phase_range("backward")


def test_steps_and_phases_in_documented_order():
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder()
    with annotate(model, opt, emit=rec) as session:
        train(model, opt, batches=3)
        assert session.steps_completed == 3
    ranges = rec.ranges()
    top = [r for r in ranges if r.parent is None]
    # Three full steps, then the exhausted loader's last __next__ in a trailing step.
    assert [r.name for r in top] == [naming.step_range(k) for k in range(4)]
    phases = [naming.phase_range(p) for p in naming.PHASES]
    for step in top[:3]:
        assert children(ranges, step) == phases
    assert children(ranges, top[3]) == [naming.phase_range("data")]


def test_loss_computed_inside_forward_is_a_nested_loss_phase():
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder()
    ids = torch.randint(0, VOCAB, (2, 5))
    with annotate(model, opt, emit=rec):
        opt.zero_grad()
        model(ids, labels=ids).backward()
        opt.step()
    ranges = rec.ranges()
    root = next(r for r in ranges if r.name == fwd("", "Net"))
    assert children(ranges, root)[-1] == naming.phase_range("loss")
    step = next(r for r in ranges if r.name == naming.step_range(0))
    assert children(ranges, step) == [naming.phase_range(p) for p in naming.PHASES[1:]]


def test_forward_only_loop_has_one_step_per_root_forward():
    model = Net()
    rec = Recorder()
    with annotate(emit=rec) as session, torch.no_grad():
        for (ids,) in loader(3):
            model(ids)
        assert session.steps_completed == 3
    ranges = rec.ranges()
    steps = [r for r in ranges if r.parent is None]
    assert [r.name for r in steps][:3] == [naming.step_range(k) for k in range(3)]
    for step in steps[:3]:
        assert children(ranges, step) == [naming.phase_range(p) for p in ("data", "forward")]
    assert not any(r.name.startswith("nsysmap:bwd:") for r in ranges)


def test_a_module_called_twice_gets_a_range_per_call_and_pairs_its_backwards():
    class Tag(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, label, rec):
            ctx.label, ctx.rec = label, rec
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            ctx.rec.mark(ctx.label)
            return grad, None, None

    class Twice(nn.Module):
        def __init__(self, rec):
            super().__init__()
            self.shared = nn.Linear(WIDTH, WIDTH)
            self.rec, self.calls = rec, 0

        def forward(self, x):
            a = self.shared(x)  # call 1
            b = self.shared(a * 2)  # call 2, on call 1's output
            return b + self.shared(x)  # call 3, a parallel branch

    rec = Recorder()
    model = Twice(rec)
    original = model.shared.forward

    def tagged(x):
        model.calls += 1
        return Tag.apply(original(x), f"call{model.calls}", rec)

    model.shared.forward = tagged
    with annotate(model, emit=rec):
        model(torch.randn(3, WIDTH, requires_grad=True)).sum().backward()
    assert rec.violations == [] and rec.open_ranges() == []
    name = bwd("shared", "Linear")
    backward_ranges = [r for r in rec.ranges() if r.name == name]
    assert len(backward_ranges) == 3
    assert len([r for r in rec.ranges() if r.name == fwd("shared", "Linear")]) == 3
    assert all(r.parent == bwd("", "Twice") for r in backward_ranges)  # siblings, no mixing
    for label in ("call1", "call2", "call3"):
        (position,) = rec.marks(label)
        inside = [r for r in backward_ranges if r.contains(position)]
        assert len(inside) == 1, label
    marks = {label: rec.marks(label)[0] for label in ("call1", "call2", "call3")}
    ranges_of = {k: next(r for r in backward_ranges if r.contains(v)) for k, v in marks.items()}
    assert len({id(r) for r in ranges_of.values()}) == 3


def test_embedding_backward_range_covers_its_weight_gradient_with_tied_weights():
    model = Net()
    model.head.weight = model.emb.weight  # tied, as GPT-2's lm_head and wte
    rec = Recorder()
    model.emb.weight.register_hook(lambda grad: rec.mark("wte-grad"))
    ids = torch.randint(0, VOCAB, (2, 5))
    with annotate(model, emit=rec):
        model(ids, labels=ids).backward()
    assert rec.violations == [] and rec.open_ranges() == []
    (emb_range,) = [r for r in rec.ranges() if r.name == bwd("emb", "Embedding")]
    (grad_mark,) = rec.marks("wte-grad")
    assert emb_range.contains(grad_mark)  # the hooks alone would give an empty range


def test_root_returning_a_dict_has_no_backward_range_and_torch_does_not_warn(recwarn):
    class DictOut(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = Net(layers=1)

        def forward(self, ids):
            return {"logits": self.body(ids)}

    model = DictOut()
    rec = Recorder()
    with annotate(model, emit=rec):
        model(torch.randint(0, VOCAB, (2, 5)))["logits"].sum().backward()
    names = rec.names()
    assert fwd("", "DictOut") in names and bwd("", "DictOut") not in names
    assert bwd("body.blocks.0.lin1", "Linear") in names
    assert not [w for w in recwarn if "backward hook" in str(w.message).lower()]


def test_exception_inside_forward_leaves_nothing_open_and_removes_hooks():
    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    model = Net()
    model.blocks[1].act = Boom()
    hooks_before = _global_hook_counts()
    rec = Recorder()
    ids = torch.randint(0, VOCAB, (2, 5))
    with pytest.raises(RuntimeError, match="boom"), annotate(model, emit=rec):
        model(ids)
    assert rec.violations == [] and rec.open_ranges() == []
    assert fwd("blocks.1.act", "Boom") in rec.names()
    assert _global_hook_counts() == hooks_before
    with annotate(model, emit=rec):  # caught inside: training goes on, ranges stay balanced
        with pytest.raises(RuntimeError):
            model(ids)
        assert [n for n in rec.open_ranges()] == [naming.step_range(0)]
    assert rec.open_ranges() == []


def test_keyboard_interrupt_inside_forward_is_cleaned_up_on_exit():
    class Interrupt(nn.Module):
        def forward(self, x):
            raise KeyboardInterrupt

    model = Net()
    model.blocks[0].lin2 = Interrupt()
    rec = Recorder()
    with pytest.raises(KeyboardInterrupt), annotate(model, emit=rec):
        model(torch.randint(0, VOCAB, (2, 5)))
    # always_call forward hooks do not run for KeyboardInterrupt; exit closed them.
    assert rec.violations == [] and rec.open_ranges() == []


def test_exception_inside_backward_closes_the_backward_ranges_at_once():
    class Fails(nn.Module):
        def forward(self, x):
            return FailBackward.apply(x)

    model = Net()
    model.blocks[0].act = Fails()
    rec = Recorder()
    with annotate(model, emit=rec):
        with pytest.raises(RuntimeError, match="backward failed"):
            model(torch.randint(0, VOCAB, (2, 5))).sum().backward()
        assert rec.open_ranges() == [naming.step_range(0)]
    assert rec.violations == [] and rec.open_ranges() == []


def test_annotate_is_idempotent_nested_and_as_decorator():
    model = Net()
    ids = torch.randint(0, VOCAB, (2, 5))
    inner = Recorder()

    @annotate(model, emit=inner)  # inside an active session its emit choice is ignored
    def forward_once():
        with torch.no_grad():
            model(ids)

    hooks_before = _global_hook_counts()
    rec = Recorder()
    with annotate(model, emit=rec), annotate(model, emit=rec), annotate(emit=rec):
        forward_once()
        forward_once()
    assert _global_hook_counts() == hooks_before
    assert inner.events == [] and rec.violations == [] and rec.open_ranges() == []
    assert rec.names().count(fwd("blocks.0.lin1", "Linear")) == 2  # one per call
    assert rec.names().count(naming.step_range(1)) == 1
    forward_once()  # the decorator alone installs and removes
    assert instrument.active() is None
    assert inner.names().count(fwd("", "Net")) == 1


def test_uninstall_restores_torch_exactly():
    from instrument.ranges.session import LOSS_FUNCTIONS

    def snapshot():
        dl = torch.utils.data.dataloader._BaseDataLoaderIter
        state = {
            "autograd.backward": torch.autograd.backward,
            "autograd.grad": torch.autograd.grad,
            "Tensor.backward": vars(torch.Tensor).get("backward"),
            "Optimizer.zero_grad": vars(torch.optim.Optimizer).get("zero_grad"),
            "Module.zero_grad": vars(nn.Module).get("zero_grad"),
            "Module.__call__": vars(nn.Module).get("__call__"),
            "SGD.zero_grad": vars(torch.optim.SGD).get("zero_grad"),
            "next": vars(dl).get("__next__"),
            "hooks": _global_hook_counts(),
        }
        state.update({f"F.{n}": getattr(F, n) for n in LOSS_FUNCTIONS if hasattr(F, n)})
        return state

    import warnings

    before, filters_before = snapshot(), list(warnings.filters)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with annotate(model, opt, emit=Recorder()):
        during = snapshot()
        train(model, opt, batches=1)
    assert during["autograd.backward"] is not before["autograd.backward"]
    assert during["F.cross_entropy"] is not before["F.cross_entropy"]
    assert during["hooks"] != before["hooks"]
    after = snapshot()
    assert after.keys() == before.keys()
    for key, value in before.items():
        assert after[key] is value or after[key] == value, key
    assert warnings.filters == filters_before
    assert all(not p._post_accumulate_grad_hooks for p in model.parameters())


def test_names_for_unregistered_and_secondary_roots():
    class MakesItsOwn(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(WIDTH, WIDTH)

        def forward(self, x):
            return nn.Identity()(self.lin(x))  # a module created on the fly

    model, crit = MakesItsOwn(), nn.MSELoss()
    rec = Recorder()
    x = torch.randn(2, WIDTH)
    with annotate(emit=rec):
        crit(model(x), x).backward()
    names = rec.names()
    assert fwd("", "MakesItsOwn") in names  # first top-level module: the primary root
    assert fwd("~Identity", "Identity") in names
    assert fwd("@MSELoss", "MSELoss") in names  # a later top-level module: a secondary root


def test_torch_emitter_records_user_annotations_only_while_profiling():
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with annotate(model, opt, emit="torch") as session:
        train(model, opt, batches=1)
        assert session._mode[0] == "root"  # no profiler: only the root is hooked
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        with prof:
            train(model, opt, batches=1)
    events = [e for e in prof.events() if e.name.startswith("nsysmap:")]
    names = {e.name for e in events}
    assert naming.step_range(2) in names  # steps 0-1 ran before the profiler
    assert fwd("blocks.0.lin1", "Linear") in names and bwd("blocks.0.lin1", "Linear") in names
    assert naming.step_range(0) not in names


def test_off_emits_nothing_hooks_only_the_root_and_still_counts_steps():
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hooks_before = _global_hook_counts()
    with annotate(model, opt, emit="off") as session:
        assert not session.emitting
        assert _global_hook_counts()[:4] == hooks_before[:4]  # no global module hooks
        train(model, opt, batches=2)
        assert session.steps_completed == 2


def test_make_emitter_choices():
    from instrument.ranges.emitters import TorchEmitter, make_emitter, nvtx_domain

    assert make_emitter("off") is None
    assert isinstance(make_emitter("torch"), TorchEmitter)
    if nvtx_domain() is None:  # no NVTX tool injected, as on this test machine
        assert make_emitter("nvtx") is None
        assert isinstance(make_emitter("auto"), TorchEmitter)
    with pytest.raises(ValueError, match="emit must be one of"):
        make_emitter("loud")


def _global_hook_counts() -> tuple[int, ...]:
    from torch.nn.modules import module as m
    from torch.optim import optimizer as o

    return (
        len(m._global_forward_pre_hooks),
        len(m._global_forward_hooks),
        len(m._global_backward_pre_hooks),
        len(m._global_backward_hooks),
        len(o._global_optimizer_pre_hooks),
        len(o._global_optimizer_post_hooks),
    )


class FakeDomain:
    """Stands in for an nvtx Domain with a tool attached (none is on this machine)."""

    def __init__(self, name):
        self.name, self.calls = name, []

    def get_event_attributes(self, message):
        return ("attrs", message)

    def push_range(self, attributes):
        self.calls.append(("push", attributes, threading.get_ident()))

    def pop_range(self):
        self.calls.append(("pop", None, threading.get_ident()))


def test_nvtx_emission_goes_to_the_nsysmap_domain_when_a_tool_listens(monkeypatch):
    import nvtx

    from instrument.ranges.emitters import BothEmitter, NvtxEmitter, make_emitter

    domains = {}
    monkeypatch.setattr(nvtx, "get_domain", lambda name: domains.setdefault(name, FakeDomain(name)))
    assert isinstance(make_emitter("nvtx"), NvtxEmitter)
    assert isinstance(make_emitter("auto"), BothEmitter)
    model = Net()
    with annotate(model, emit="nvtx"), torch.no_grad():
        model(torch.randint(0, VOCAB, (2, 5)))
    (domain,) = domains.values()
    assert domain.name == naming.DOMAIN
    pushes = [c[1][1] for c in domain.calls if c[0] == "push"]
    assert pushes[:3] == [naming.step_range(0), naming.phase_range("forward"), fwd("", "Net")]
    assert fwd("blocks.0.lin1", "Linear") in pushes
    depth = 0
    for kind, _, _ in domain.calls:  # every push popped, never below zero
        depth += 1 if kind == "push" else -1
        assert depth >= 0
    assert depth == 0


def test_auto_emits_nvtx_always_and_torch_annotations_while_profiling(monkeypatch):
    import nvtx

    domains = {}
    monkeypatch.setattr(nvtx, "get_domain", lambda name: domains.setdefault(name, FakeDomain(name)))
    model = Net()
    ids = torch.randint(0, VOCAB, (2, 5))
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    with annotate(model, emit="auto"), torch.no_grad():
        model(ids)
        with prof:
            model(ids)
    nvtx_steps = [c[1][1] for c in domains[naming.DOMAIN].calls if c[1] and "step:" in c[1][1]]
    assert nvtx_steps == [naming.step_range(0), naming.step_range(1)]
    torch_steps = [e.name for e in prof.events() if e.name.startswith("nsysmap:step:")]
    assert torch_steps == [naming.step_range(1)]


def test_stacks_close_only_recent_backward_frames_and_reach_engine_threads():
    from instrument.ranges import _state

    rec = Recorder()
    stacks = _state.Stacks(rec)
    ts = stacks.get()
    stacks.push(ts, _state.STEP, 0, "step")
    stacks.push(ts, _state.BWD, "old", "bwd-old", epoch=1)
    stacks.push(ts, _state.BWD, "new", "bwd-new", epoch=2)
    stacks.push(ts, _state.FWD, "recompute", "fwd-recompute")
    stacks.close_backward_frames(ts, since_epoch=2)
    assert rec.open_ranges() == ["step", "bwd-old"] and ts.fwd_depth == 0
    # A thread with no accelerator device cannot be reached: its frames are forgotten.
    other = _state.ThreadState(ident=-1)
    other.stack.append(_state.Frame(_state.BWD, "x", None, epoch=5))
    stacks.threads[-1] = other
    stacks.close_foreign(since_epoch=3)
    assert other.stack == [] and rec.open_ranges() == ["step", "bwd-old"]
    # The engine-thread trampoline calls its function from inside a backward pass.
    seen = []
    _state._run_on_engine_thread(torch.device("cpu"), lambda: seen.append(torch.is_grad_enabled()))
    assert seen == [False]  # autograd runs backward functions with grad mode off


def test_inplace_modules_turn_module_backward_ranges_off_instead_of_breaking_training():
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(inplace=True), nn.Linear(WIDTH, 1))
    rec = Recorder()
    x = torch.randn(2, WIDTH)
    expected = model(x).sum()
    with pytest.warns(RuntimeWarning, match="inplace=True"), annotate(model, emit=rec):
        loss = model(x).sum()
        loss.backward()
    assert torch.equal(loss, expected)
    names = rec.names()
    assert fwd("1", "ReLU") in names and naming.phase_range("backward") in names
    assert not [n for n in names if n.startswith("nsysmap:bwd:")]
    assert rec.violations == [] and rec.open_ranges() == []
