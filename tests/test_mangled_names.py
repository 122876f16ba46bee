"""Short names of kernels a torch.profiler trace names by their mangled C++ symbol
(nsysmap.read.torch.mangled): ROCm traces name Composable Kernel's kernels so, and
cut to a table's width the name kept only `_ZN7ck_tile6kentryILi1ENS_12Rm…`."""

from __future__ import annotations

import pytest

from nsysmap.flow.verbs import load_profile
from nsysmap.read.torch.mangled import short_mangled
from tests.torch_traces import kernel, launch, write_trace

# Composable Kernel's RMS norm as a ROCm trace names it (its parameters cut short).
CK = (
    "_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassINS_27Rmsnorm2d"
    "FwdPipelineProblemIDF16bDF16bfDF16bDF16bDF16bffNS_19Generic2dBlockShapeINS_8sequenceIJLi1"
    "ELi3072EEEENS5_IJLi1ELi128EEEENS5_IJLi1ELi8EEEEEENS_18Rmsnorm2dFwdTraitsILb1ELb0ELb0ELb0EL"
    "NS_21Rmsnorm2dFusedAddEnumE1ELNS_23Rmsnorm2dFusedQuantEnumE0ELNS_22Rmsnorm2dSensitiveEnumE0"
    "EEEEENS_33Rmsnorm2dFwdPipelineDefaultPolicyEEENS_17Default2DEpilogueINS_24Default2DEpilogu"
    "eProblemIfDF16bLb0ELb1ELb0EEEvEEEEJNSM_5KargsEEEEvDpT1_"
)


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (CK, "kentry<Rmsnorm2dFwd…>"),  # the function, and the kernel it runs
        ("_ZN2at6native18elementwise_kernelEv", "elementwise_kernel"),
        ("_Z14vectorAdd_fp32PfS_S_i", "vectorAdd_fp32"),  # no namespace
        ("__ZN3foo3barIiEEvv", "bar"),  # `__Z`; a template argument without a name
        ("_ZN3foo3barIS_3BazEEvv", "bar<Baz…>"),  # a reference to a name met before
        ("_ZN3foo3barIN5other3BazEEEvv", "bar<Baz…>"),  # a nested name's last
        ("_ZL6kernelv", "kernel"),  # internal linkage
        ("_Z3foo", "foo"),
        ("_ZNSt6vectorIiSaIiEE9push_backEOi", "push_back"),  # a class template's member
        # Parameter types are no part of the name, nor its template arguments.
        ("_Z11gemm_kernel10GemmParams", "gemm_kernel"),
        ("_Z6kernelIfEv6Params", "kernel"),
        ("_ZN3foo3barIiEEvN3QuxE", "bar"),
    ],
)
def test_a_mangled_name_gives_its_function_and_first_template_name(name, short):
    assert short_mangled(name) == short


@pytest.mark.parametrize(
    "name",
    [
        "void foo<int>(int)",
        "Memcpy HtoD",
        "_Z",
        "_ZN99abc",  # a name longer than the symbol
        "_Zoom3abc",  # `_Z`, then neither a nested name nor a length
        "_Z\uff13abc",  # a digit, but not an ASCII one
        CK[:150],  # cut short
        "_Z" + "1" * 5000,  # a length of 5000 digits
        "_Z" + "S" * 40000,
        "_Z3fooI" + "P" * 100_000 + "iE",  # types nested deeper than recursion goes
    ],
)
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
