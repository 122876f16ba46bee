"""Short names of kernels a torch.profiler trace names by their mangled C++ symbol
(nsysmap.read.torch.mangled): ROCm traces name Composable Kernel's kernels so, and
cut to a table's width the name kept only `_ZN7ck_tile6kentryILi1ENS_12Rm…`."""

from __future__ import annotations

import pytest

from nsysmap.flow.verbs import load_profile
from nsysmap.read.torch.mangled import short_mangled
from tests.torch_traces import kernel, launch, write_trace

CK = (
    "_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassINS_27Rmsnorm2d"
    "FwdPipelineProblemIDF16bDF16bfDF16bDF16bDF16bffNS_19Generic2dBlockShapeINS_8sequenceIJLi1"
    "ELi3072EEEENS5_IJLi1ELi128EEEEEEEEEEJNSM_5KargsEEEEvDpT1_"
)


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (CK, "kentry<Rmsnorm2dFwd…>"),  # the function, and the kernel it runs
        ("_ZN2at6native18elementwise_kernelEv", "elementwise_kernel"),
        ("_Z14vectorAdd_fp32PfS_S_i", "vectorAdd_fp32"),  # no namespace
        ("__ZN3foo3barIiEEvv", "bar"),  # `__Z`; a template argument without a name
        ("_ZN3foo3barIS_3BazEEvv", "bar<Baz…>"),  # a reference to a name met before
    ],
)
def test_a_mangled_name_gives_its_function_and_first_template_name(name, short):
    assert short_mangled(name) == short


@pytest.mark.parametrize("name", ["void foo<int>(int)", "_Z", "_ZN99abc", "Memcpy HtoD"])
def test_what_is_not_read_gives_none(name):
    assert short_mangled(name) is None


def test_the_trace_reader_shortens_mangled_kernel_names(tmp_path):
    names = [CK, "_ZN99abc", "void at::native::vectorized_elementwise_kernel<4>(int)"]
    events = [launch(20 * i, i) for i in range(1, 4)]
    events += [kernel(name, 20 * i + 5, 10, i) for i, name in enumerate(names, start=1)]
    ops = load_profile(write_trace(tmp_path / "t.json", events)).ops
    short = dict(zip(ops["name"], ops["short_name"], strict=True))
    assert short[CK] == "kentry<Rmsnorm2dFwd…>"
    assert short["_ZN99abc"] == "_ZN99abc"
    assert short["void at::native::vectorized_elementwise_kernel<4>(int)"] == (
        "vectorized_elementwise_kernel"
    )
