"""Compiled kernels to modules and compile time, on hand-written traces (no compiling).

The compiled.json contract (instrument/compiled_doc.py) and its use by
nsysmap.attribution.compiled_modules / compile_time: small Kineto traces whose
expected attribution is worked out by hand in whole microseconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from instrument import compiled_doc as doc
from nsysmap.core.errors import NotAProfile
from nsysmap.flow.verbs import analyse, load_profile

US = 1000  # ns

# ------------------------------------------------------------------ contract


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("cpp_fused_gelu_1:3", "cpp_fused_gelu_1"),
        ("triton_poi_fused_add_0:12", "triton_poi_fused_add_0"),
        ("extern_kernels.addmm:2", "aten::addmm"),
        ("extern_kernels.mm", "aten::mm"),
        ("aten.randint.low_out:2", "aten::randint"),
        (
            "torch.ops.aten._scaled_dot_product_flash_attention.default:7",
            "aten::_scaled_dot_product_flash_attention",
        ),
    ],
)
def test_kernel_names_as_a_trace_shows_them(source, name):
    assert doc.kernel_name(source) == name


@pytest.mark.parametrize(
    ("fqn", "path"),
    [
        ("L['self'].blocks.1.act", "blocks.1.act"),
        ("L['self']._orig_mod.head", "head"),
        ("L['self']", ""),
        ("L['model'].layers[0].mlp", "layers.0.mlp"),
        ("L['self']._modules['h']._modules['0'].attn", "h.0.attn"),
        ("G['shared'].proj", "proj"),
    ],
)
def test_module_paths_relative_to_the_compiled_region(fqn, path):
    assert doc.module_path(fqn) == path


def test_nearest_common_module_and_paths_under_a_region():
    assert doc.common_module(["blocks.0", "blocks.1.ln"]) == "blocks"
    assert doc.common_module(["blocks.0.fc1"]) == "blocks.0.fc1"
    assert doc.common_module(["head", "blocks.0"]) == ""
    assert doc.common_module(["h.1", "h.10"]) == "h"  # segments, not characters
    assert doc.common_module([]) is None


def test_kernel_rows_number_the_occurrences_of_each_name():
    graph = {
        "key": "K",
        "direction": "forward",
        "kernels": [
            {"kernel": "cpp_a", "modules": ["x.a"]},
            {"kernel": "aten::mm", "modules": ["x.b"]},
            {"kernel": "cpp_a", "modules": ["y.a", "y.b.c"]},
        ],
    }
    rows = doc.kernel_rows(doc.document([graph], {"x.a": "A", "y": "Y"}, "2.13", []))
    assert [(r["kernel"], r["occurrence"], r["rel_module"], r["rel_class"]) for r in rows] == [
        ("cpp_a", 0, "x.a", "A"),
        ("aten::mm", 0, "x.b", None),
        ("cpp_a", 1, "y", "Y"),
    ]
    assert rows[2]["rel_modules"] == ["y.a", "y.b.c"]


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"format": "other", "version": 1},
        {"format": doc.FORMAT, "version": 2, "graphs": []},
        {"format": doc.FORMAT, "version": 1, "graphs": [{"key": "K", "direction": "sideways"}]},
        {"format": doc.FORMAT, "version": 1, "graphs": [{"key": "K", "direction": "forward"}]},
    ],
)
def test_documents_this_version_does_not_understand_are_refused(bad):
    with pytest.raises(doc.DocumentError):
        doc.kernel_rows(bad)


# ------------------------------------------------------------- CPU traces


def _x(cat: str, name: str, tid: int, start_us: int, dur_us: int, **args) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": start_us,
        "dur": dur_us,
        "args": args,
    }


def _annotation(name: str, start_us: int, dur_us: int, tid: int = 1) -> dict:
    return _x("user_annotation", name, tid, start_us, dur_us)


def _op(name: str, start_us: int, dur_us: int, tid: int = 1) -> dict:
    return _x("cpu_op", name, tid, start_us, dur_us)


FWD, BWD = "fwdKEY", "bwdKEY"
CALL = "## Call CompiledFxGraph {} ##"
COMPILED = doc.document(
    [
        {
            "key": FWD,
            "direction": "forward",
            "kernels": [
                {"kernel": "cpp_fused_gelu_1", "modules": ["blocks.0.act"]},
                {"kernel": "aten::addmm", "modules": ["blocks.0.fc2"]},
                {"kernel": "cpp_fused_add_2", "modules": ["blocks.0", "blocks.1.ln"]},
                {"kernel": "cpp_fused_gelu_1", "modules": ["blocks.1.act"]},
            ],
        },
        {
            "key": BWD,
            "direction": "backward",
            "kernels": [
                {"kernel": "aten::mm", "modules": ["blocks.1.fc2"]},
                {"kernel": "cpp_fused_sum_0", "modules": []},
            ],
        },
    ],
    {
        "blocks": "Sequential",
        "blocks.0.act": "GELU",
        "blocks.0.fc2": "Linear",
        "blocks.1.act": "GELU",
        "blocks.1.fc2": "Linear",
    },
    "2.13.0",
    [],
)

# One training step of `torch.compile(Net)`: the wrapper's hooks give fwd:Net:
# and bwd:Net:, the compiled graphs' kernels run inside the graph calls.
CPU_EVENTS = [
    _annotation("nsysmap:step:0", 0, 1000),
    _annotation("nsysmap:phase:forward", 0, 400),
    _annotation("nsysmap:fwd:Net:", 10, 380),
    _annotation(CALL.format(FWD), 100, 200),
    _op("aten::empty_strided", 105, 5),  # allocation: in the call, no kernel
    _op("graph_0_cpp_fused_gelu_1", 110, 10),
    _op("aten::addmm", 130, 40),
    _op("aten::copy_", 140, 10),  # inside addmm: its child
    _op("graph_0_cpp_fused_add_2", 180, 20),
    _op("graph_0_cpp_fused_gelu_1", 210, 30),
    _op("aten::mul", 320, 10),  # after the call: the model's own forward
    _annotation("nsysmap:phase:backward", 500, 400),
    _annotation("nsysmap:bwd:Net:", 510, 380),
    _annotation(CALL.format(BWD), 600, 100),
    _op("aten::mm", 610, 50),
    _op("graph_0_cpp_fused_sum_0", 670, 20),
]
# op -> (module, class, direction, compiled_graph, fused_modules, self time us)
EXPECTED_CPU = {
    ("aten::empty_strided", 105): ("", "Net", "forward", FWD, None, 5),
    ("graph_0_cpp_fused_gelu_1", 110): ("blocks.0.act", "GELU", "forward", FWD, "blocks.0.act", 10),
    ("aten::addmm", 130): ("blocks.0.fc2", "Linear", "forward", FWD, "blocks.0.fc2", 30),
    ("aten::copy_", 140): ("blocks.0.fc2", "Linear", "forward", FWD, "blocks.0.fc2", 10),
    ("graph_0_cpp_fused_add_2", 180): (
        "blocks",
        "Sequential",
        "forward",
        FWD,
        "blocks.0, blocks.1.ln",
        20,
    ),
    ("graph_0_cpp_fused_gelu_1", 210): ("blocks.1.act", "GELU", "forward", FWD, "blocks.1.act", 30),
    ("aten::mul", 320): ("", "Net", "forward", None, None, 10),
    ("aten::mm", 610): ("blocks.1.fc2", "Linear", "backward", BWD, "blocks.1.fc2", 50),
    ("graph_0_cpp_fused_sum_0", 670): ("", "Net", "backward", BWD, "", 20),
}


def _write(tmp: Path, events: list[dict], compiled: dict | None) -> Path:
    trace = tmp / "trace.json"
    trace.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    if compiled is not None:
        (tmp / doc.FILE).write_text(json.dumps(compiled))
    return trace


def _by_op(ops: pl.DataFrame, t0_ns: int) -> dict[tuple[str, int], tuple]:
    cols = ["module", "module_class", "direction", "compiled_graph", "fused_modules"]
    return {
        (r["name"], (r["start_ns"] - t0_ns) // US): (*(r[c] for c in cols), r["dur_ns"] // US)
        for r in ops.iter_rows(named=True)
    }


@pytest.mark.slow
def test_cpu_trace_compiled_kernels_get_their_call_sites_modules(tmp_path):
    report = load_profile(_write(tmp_path, CPU_EVENTS, COMPILED))
    ops = analyse(report).ops
    assert _by_op(ops, int(ops["start_ns"].min()) - 105 * US) == EXPECTED_CPU
    assert ops["dur_ns"].sum() == sum(v[-1] for v in EXPECTED_CPU.values()) * US
    assert report.compiled.height == 6


@pytest.mark.slow
def test_without_compiled_json_kernels_stay_in_the_compiled_regions_module(tmp_path):
    ops = analyse(load_profile(_write(tmp_path, CPU_EVENTS, None))).ops
    kernels = ops.filter(pl.col("name").str.starts_with("graph_0_"))
    assert set(kernels["module"]) == {""} and kernels["fused_modules"].null_count() == 4
    # the graph calls are still named, and the module ranges give the directions
    assert set(zip(kernels["compiled_graph"], kernels["direction"], strict=True)) == {
        (FWD, "forward"),
        (BWD, "backward"),
    }


def test_a_compiled_submodule_puts_its_kernels_under_its_own_path(tmp_path):
    events = [
        _annotation("nsysmap:step:0", 0, 1000),
        _annotation("nsysmap:phase:forward", 0, 400),
        _annotation("nsysmap:fwd:Net:", 10, 380),
        _annotation("nsysmap:fwd:Block:blocks.3", 50, 300),  # blocks[3] = torch.compile(block)
        _annotation(CALL.format("K"), 100, 200),
        _op("graph_0_cpp_fused_gelu_0", 110, 10),
        _op("graph_0_cpp_fused_add_1", 130, 10),
    ]
    compiled = doc.document(
        [
            {
                "key": "K",
                "direction": "forward",
                "kernels": [
                    {"kernel": "cpp_fused_gelu_0", "modules": ["act"]},
                    {"kernel": "cpp_fused_add_1", "modules": [""]},
                ],
            }
        ],
        {"act": "GELU"},
        "2.13.0",
        [],
    )
    ops = analyse(load_profile(_write(tmp_path, events, compiled))).ops
    rows = dict(
        zip(
            ops["name"],
            zip(ops["module"], ops["module_class"], ops["fused_modules"], strict=True),
            strict=True,
        )
    )
    assert rows["graph_0_cpp_fused_gelu_0"] == ("blocks.3.act", "GELU", "blocks.3.act")
    assert rows["graph_0_cpp_fused_add_1"] == ("blocks.3", "Block", "blocks.3")


def test_a_broken_compiled_json_is_a_one_line_input_error(tmp_path):
    (tmp_path / doc.FILE).write_text('{"format": "nsysmap.compiled", "version": 9}')
    with pytest.raises(NotAProfile, match="compiled-kernel document"):
        load_profile(_write(tmp_path, CPU_EVENTS, None))


# ------------------------------------------------------------ CUDA traces


def _kernel(name: str, start_us: int, dur_us: int, correlation: int) -> dict:
    event = _x("kernel", name, 7, start_us, dur_us, device=0, stream=7, correlation=correlation)
    event["pid"] = 0
    return event


def _launch(name: str, start_us: int, correlation: int) -> dict:
    return _x(
        "cuda_driver" if name.startswith("cu") and "Graph" not in name else "cuda_runtime",
        name,
        1,
        start_us,
        2,
        correlation=correlation,
    )


GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32"
REPLAY = "replayKEY"
CUDA_COMPILED = doc.document(
    [
        {
            "key": key,
            "direction": "forward",
            "kernels": [
                {"kernel": "triton_poi_fused_gelu_0", "modules": [f"{a}.act"]},
                {"kernel": "aten::mm", "modules": [f"{a}.fc"]},
                {"kernel": "triton_poi_fused_gelu_0", "modules": [f"{b}.act"]},
            ],
        }
        for key, a, b in ((FWD, "blocks.0", "blocks.1"), (REPLAY, "h.0", "h.1"))
    ],
    {},
    "2.13.0",
    [],
)
# A Triton launch is a CPU event named like its kernel around cuLaunchKernel; an
# extern matmul an aten::mm around its cuBLAS launches. With CUDA graphs
# (mode="reduce-overhead") one cudaGraphLaunch replays every kernel of the call.
CUDA_EVENTS = [
    _annotation("nsysmap:step:0", 0, 1000),
    _annotation("nsysmap:phase:forward", 0, 900),
    _annotation("nsysmap:fwd:Net:", 10, 880),
    _annotation(CALL.format(FWD), 100, 200),
    _op("triton_poi_fused_gelu_0", 110, 10),
    _launch("cuLaunchKernel", 112, 11),
    _op("aten::mm", 130, 30),
    _launch("cudaLaunchKernel", 135, 12),
    _launch("cudaLaunchKernel", 150, 13),
    _op("triton_poi_fused_gelu_0", 170, 10),
    _launch("cuLaunchKernel", 172, 14),
    _kernel("triton_poi_fused_gelu_0", 400, 10, 11),
    _kernel(GEMM, 410, 40, 12),
    _kernel("splitKreduce_kernel", 450, 5, 13),
    _kernel("triton_poi_fused_gelu_0", 455, 10, 14),
    _annotation(CALL.format(REPLAY), 500, 100),
    _launch("cudaGraphLaunch", 510, 20),
    _kernel("triton_poi_fused_gelu_0", 700, 10, 20),
    _kernel(GEMM, 710, 40, 20),
    _kernel("triton_poi_fused_gelu_0", 750, 10, 20),
]
EXPECTED_CUDA = {
    ("triton_poi_fused_gelu_0", 400): ("blocks.0.act", None, "forward", FWD, "blocks.0.act", 10),
    (GEMM, 410): ("blocks.0.fc", None, "forward", FWD, "blocks.0.fc", 40),
    ("splitKreduce_kernel", 450): ("blocks.0.fc", None, "forward", FWD, "blocks.0.fc", 5),
    ("triton_poi_fused_gelu_0", 455): ("blocks.1.act", None, "forward", FWD, "blocks.1.act", 10),
    ("triton_poi_fused_gelu_0", 700): ("h.0.act", None, "forward", REPLAY, "h.0.act", 10),
    (GEMM, 710): ("h.0.fc", None, "forward", REPLAY, "h.0.fc", 40),  # the extern site between
    ("triton_poi_fused_gelu_0", 750): ("h.1.act", None, "forward", REPLAY, "h.1.act", 10),
}


@pytest.mark.slow
def test_cuda_trace_triton_extern_and_replayed_kernels_get_their_modules(tmp_path):
    ops = analyse(load_profile(_write(tmp_path, CUDA_EVENTS, CUDA_COMPILED))).ops
    assert set(ops["kind"]) == {"kernel"}
    assert _by_op(ops, int(ops["start_ns"].min()) - 400 * US) == EXPECTED_CUDA


# ---------------------------------------------------------- compile time


def test_compilation_inside_the_capture_is_counted_apart_and_warned(tmp_path):
    events = [
        _annotation("nsysmap:step:0", 0, 1000),
        _annotation("nsysmap:phase:forward", 0, 1000),
        _op("_compile.compile_inner (dynamo_timed)", 100, 300),
        _op("bytecode_tracing (dynamo_timed)", 110, 50),
        _op("aten::empty", 120, 10),  # fake-tensor work while tracing
        _op("compile_fx_inner (dynamo_timed)", 200, 150),
        _op("TorchDynamo Cache Lookup", 450, 20),  # run time, not compilation
        _op("backward._backward_impl (dynamo_timed)", 600, 100),  # a lazy backward
        _op("aten::mm", 800, 100),
    ]
    report = load_profile(_write(tmp_path, events, COMPILED))
    facts = {
        k: report.meta_value(k) for k in ("compile_events", "compile_wall_ns", "compile_op_ns")
    }
    assert facts == {
        "compile_events": "2",
        "compile_wall_ns": str(400 * US),
        "compile_op_ns": str(400 * US),
    }
    text = analyse(report).summary_text
    assert "2 compiled graphs traced to modules. 2 compilations inside the captured steps" in text
    assert "400.000 ms" not in text and "0.400 ms wall; 0.400 ms (76.9%)" in text
    assert "Warning: the profiled steps still compile" in text


@pytest.mark.slow
def test_a_capture_without_compilation_says_so_and_eager_captures_say_nothing(tmp_path):
    text = analyse(load_profile(_write(tmp_path, CPU_EVENTS, COMPILED))).summary_text
    assert "Compilation: 2 compiled graphs traced to modules. No compilation inside" in text
    eager = tmp_path / "eager"
    eager.mkdir()
    plain = [*CPU_EVENTS[:3], _op("aten::mul", 320, 10)]
    text = analyse(load_profile(_write(eager, plain, None))).summary_text
    assert "Compilation" not in text


def test_replayed_kernels_follow_the_call_sites_in_order():
    from nsysmap.attribution.compiled_replay import replayed

    names = ["triton_a", "aten::mm", "triton_b", "aten::mm", "aten::addmm", "triton_c"]
    names += ["aten::mm", "aten::mm"]  # two extern sites after triton_c
    sites = pl.DataFrame(
        {
            "graph": "K",
            "site": range(len(names)),
            "kernel": names,
            "occurrence": [0, 0, 0, 1, 0, 0, 2, 3],
            "rel_module": [f"m{i}" for i in range(len(names))],
            "rel_class": None,
            "rel_modules": [[f"m{i}"] for i in range(len(names))],
        },
        schema_overrides={"rel_class": pl.String},
    )
    ran = ["triton_a", "gemm", "splitK", "triton_b", "gemm", "gemm", "triton_c", "g1", "g2", "g3"]
    ops = pl.DataFrame(
        {"_row": range(len(ran)), "kind": "kernel", "name": ran, "start_ns": range(0, 100, 10)}
    )
    found = pl.DataFrame(
        {"_row": range(len(ran)), "call": 0, "graph": "K"},
        schema_overrides={"call": pl.UInt32},
    ).with_columns(pl.lit(None, pl.List(pl.String)).alias("rel_modules"))
    got = dict(replayed(ops, found, sites).select("_row", "rel_module").iter_rows())
    # 0..6 as in the docstring; after triton_c two extern sites but three kernels: unmatched
    assert got == {0: "m0", 1: "m1", 2: "m1", 3: "m2", 4: "m3", 5: "m4", 6: "m5"}


@pytest.mark.fresh
def test_the_shared_contract_imports_neither_torch_nor_polars():
    import subprocess
    import sys

    code = (
        "import sys, instrument.compiled_doc, nsysmap.read.torch.compiled_json, "
        "nsysmap.attribution.compiled_modules;"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    code = "import sys, instrument.compiled_doc;print(bool({'polars', 'torch'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
