"""instrument/ and torch.compile, without compiling: naming, hook suspension, the
settling warm-up window and the compiled.json capture (instrument/ranges/_compile.py,
_window.py, provenance.py). Compiling for real is in tests/test_compiled_run.py.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from torch.nn.modules import module as nn_module

import instrument
from instrument import compiled_doc
from instrument.launch._window import SETTLE_LIMIT, ProfileWindow
from instrument.launch.provenance import Provenance
from nsysmap.read.torch.compiled_json import read_compiled
from tests.test_instrument_support import Recorder

pytestmark = pytest.mark.slow  # torch.compile

dynamo = pytest.importorskip("torch._dynamo")


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(4)
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(self.ln(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


@pytest.fixture
def session():
    s = instrument.install(emit=Recorder())
    yield s
    instrument.uninstall()


def _path_and_class(session, module) -> tuple[str, str]:
    info = session.names.by_id[id(module)]
    return info.path, info.fwd.split(":")[2]


def test_a_compiled_model_is_named_like_the_model_without_orig_mod(session):
    model = Net()
    model.blocks[1] = torch.compile(model.blocks[1])
    wrapper = torch.compile(model)
    session.names.name_root(wrapper)
    assert _path_and_class(session, wrapper) == ("", "Net")
    assert session.names.primary() is wrapper
    assert _path_and_class(session, model.blocks[1]) == ("blocks.1", "Block")  # its wrapper
    assert _path_and_class(session, model.blocks[1]._orig_mod.fc) == ("blocks.1.fc", "Linear")
    paths = {info.path for info in session.names.by_id.values()}
    assert not any("_orig_mod" in p for p in paths)
    assert {"blocks.0.ln", "blocks.1.ln", "head"} <= paths


def test_compiling_a_model_named_before_only_aliases_it(session):
    model = Net()
    session.names.name_root(model)
    wrapper = torch.compile(model)
    info = session.names.name_root(wrapper)
    assert info is session.names.by_id[id(model)] and info.root
    assert not any(p.startswith("@") for p in (i.path for i in session.names.by_id.values()))


def _global_hooks() -> int:
    return len(nn_module._global_forward_pre_hooks) + len(nn_module._global_backward_hooks)


def test_hooks_are_off_while_dynamo_compiles_and_back_after(session):
    session.refresh_module_hooks()  # arms the compile callbacks: torch._dynamo is loaded
    assert _global_hooks() == 2
    handler = dynamo.callback_handler
    with handler.install_callbacks(dynamo.callback.CallbackTrigger.DYNAMO, "0/0"):
        assert _global_hooks() == 0
        session.refresh_module_hooks()  # a phase starting meanwhile changes nothing
        assert _global_hooks() == 0
    assert _global_hooks() == 2
    assert session.compile_watch.compiles == 1


def test_uninstall_removes_the_compile_callbacks():
    session = instrument.install(emit=Recorder())
    session.refresh_module_hooks()
    start = session.compile_watch._start
    assert start in dynamo.callback_handler.start_callbacks
    instrument.uninstall()
    assert start not in dynamo.callback_handler.start_callbacks


def test_a_patched_loss_inside_a_compiled_function_breaks_no_graph(session):
    ts, frame = session.phases.begin("forward")  # inside a step: the wrapper would act
    try:
        fn = torch.compile(
            lambda x, y: torch.nn.functional.mse_loss(x, y) * 2, backend="eager", fullgraph=True
        )
        assert fn(torch.ones(2), torch.zeros(2)).item() == 2.0  # fullgraph: no graph break
    finally:
        session.phases.end(ts, frame)


# ------------------------------------------------------------- the window


def _drive(window: ProfileWindow, compiling_steps: set[int], steps: int) -> None:
    for k in range(steps):
        window.step_started(k)
        if k in compiling_steps:
            window.compiled(0, 2_000_000_000)
        window.step_ended(k)
    window.finish(steps)


def test_the_window_waits_for_a_step_without_compilation(tmp_path):
    window = ProfileWindow("off", tmp_path, first=1, count=2, shapes=False)
    _drive(window, {0, 1}, 6)  # compiles in steps 0 and 1 (e.g. forward, then a recompile)
    assert window.profiled == [3, 4] and window.waited == 2
    assert window.compiles_profiled == 0
    assert any("profiling started at step 3 instead of 1" in n for n in window.notes)


def test_an_eager_script_is_profiled_from_step_n(tmp_path):
    window = ProfileWindow("off", tmp_path, first=1, count=3, shapes=False)
    _drive(window, set(), 5)
    assert window.profiled == [1, 3] and window.waited == 0 and window.notes == []


def test_compilation_that_never_settles_starts_the_window_anyway_and_is_reported(tmp_path):
    window = ProfileWindow("off", tmp_path, first=1, count=2, shapes=False)
    _drive(window, set(range(20)), 20)
    start = 1 + SETTLE_LIMIT
    assert window.profiled == [start, start + 1]
    assert window.compiles_profiled == 2 and window.compile_ns_profiled == 4_000_000_000
    text = " ".join(window.notes)
    assert f"profiling starts at step {start} anyway" in text
    assert "the profiled steps still compiled: 2 compilation(s), 4.000 s" in text


# ----------------------------------------------------- compiled.json capture


class _Graph:
    """The parts of a post-grad torch.fx graph the pass reads."""

    def __init__(self, nodes: list[tuple[str, str, dict]]) -> None:
        self.nodes = [_Node(*n) for n in nodes]


class _Node:
    def __init__(self, name: str, op: str, meta: dict) -> None:
        self.name, self.op, self.meta = name, op, meta


def _stack(*paths: str) -> dict:
    classes = {"blocks.0": Block, "blocks.0.ln": nn.LayerNorm, "blocks.0.fc": nn.Linear}
    return {p: (f"L['self'].{p}", classes.get(p, nn.Module)) for p in paths}


def test_provenance_binds_kernels_to_modules_and_nsysmap_reads_it_back(tmp_path, monkeypatch):
    records = iter(
        [
            {},  # before the forward graph's codegen
            {
                "cpp_fused_ln_0:1": {"post_grad_nodes": ["var_mean", "add"]},
                "extern_kernels.addmm:2": {"post_grad_nodes": ["addmm"]},
            },
            # a backward compiled lazily: Inductor kept the forward's records
            {"cpp_fused_ln_0:1": {"post_grad_nodes": ["var_mean", "add"]}},
            {
                "cpp_fused_ln_0:1": {"post_grad_nodes": ["var_mean", "add"]},
                "extern_kernels.mm:4": {"post_grad_nodes": ["mm"]},
                "cpp_fused_sum_3:3": {"post_grad_nodes": ["sum_1", "add_9"]},
            },
        ]
    )
    monkeypatch.setattr("instrument.launch.provenance._kernel_information", lambda: next(records))
    prov = Provenance()
    prov.compile_started()
    try:
        prov.graph_nodes(
            _Graph(
                [
                    ("primals_1", "placeholder", {}),
                    (
                        "var_mean",
                        "call_function",
                        {"nn_module_stack": _stack("blocks.0", "blocks.0.ln")},
                    ),
                    ("add", "call_function", {"nn_module_stack": _stack("blocks.0")}),
                    (
                        "addmm",
                        "call_function",
                        {"nn_module_stack": _stack("blocks.0", "blocks.0.fc")},
                    ),
                ]
            )
        )
        prov.graph_kernels()
        prov.graph_done("FWD", "miss")
        prov.graph_nodes(
            _Graph(
                [
                    ("tangents_1", "placeholder", {}),
                    (
                        "mm",
                        "call_function",
                        {"fwd_nn_module_stack": _stack("blocks.0", "blocks.0.fc")},
                    ),
                    (
                        "sum_1",
                        "call_function",
                        {"fwd_nn_module_stack": _stack("blocks.0", "blocks.0.fc")},
                    ),
                    ("add_9", "call_function", {}),  # a gradient sum no module owns
                ]
            )
        )
        prov.graph_kernels()
        prov.graph_done("BWD", "miss")
        prov.graph_done("HIT", "hit")  # loaded from a cache: nothing lowered here
    finally:
        prov.uninstall()
    assert prov.write(tmp_path) == compiled_doc.FILE
    rows = read_compiled(tmp_path / compiled_doc.FILE).to_dicts()
    got = [
        (r["graph"], r["graph_direction"], r["kernel"], r["rel_module"], r["rel_class"])
        for r in rows
    ]
    assert got == [
        ("FWD", "forward", "cpp_fused_ln_0", "blocks.0", "Block"),
        ("FWD", "forward", "aten::addmm", "blocks.0.fc", "Linear"),
        ("BWD", "backward", "cpp_fused_sum_3", "blocks.0.fc", "Linear"),
        ("BWD", "backward", "aten::mm", "blocks.0.fc", "Linear"),
    ]
    assert any("graph HIT" in n for n in prov.notes)
    assert (
        json.loads((tmp_path / compiled_doc.FILE).read_text())["torch_version"] == torch.__version__
    )


def test_provenance_sets_inductor_up_and_puts_it_back():
    from torch._inductor import config

    before = (
        config.trace.provenance_tracking_level,
        config.cpp.enable_kernel_profile,
        config.post_grad_custom_post_pass,
    )
    prov = Provenance()
    prov.compile_started()
    assert config.trace.provenance_tracking_level == 1 and config.cpp.enable_kernel_profile
    (node_pass,) = config.post_grad_custom_post_pass
    assert node_pass.uuid().startswith("nsysmap-provenance-")
    prov.uninstall()
    after = (
        config.trace.provenance_tracking_level,
        config.cpp.enable_kernel_profile,
        config.post_grad_custom_post_pass,
    )
    assert after == before
