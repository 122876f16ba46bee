"""A short name for a kernel that a trace names by its mangled C++ symbol (pure).

torch.profiler traces of ROCm runs name some kernels by their Itanium-mangled
symbol, hundreds of characters long (Composable Kernel's
`_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePass...`),
where CUDA traces give a demangled name. Cut to a table's width, such a name
keeps only its first characters, and the kernel it runs (`Rmsnorm2dFwd`) is in
its template arguments. `short_mangled` reads the symbol's own names (each
written as its length and its characters) and gives the function's name and
the first name of its template arguments:

    _ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27...   ->  kentry<Rmsnorm2dFwd…>
    _ZN2at6native18elementwise_kernelEv                ->  elementwise_kernel
    _Z13vectorAdd_fp32PfS_S_i                         ->  vectorAdd_fp32

It is no demangler: it gives None for what it cannot read (the caller keeps
the name as it is).
"""

from __future__ import annotations

import re

# What a mangled name starts with (`_Z`, or `__Z` as some platforms write it).
MANGLED = r"^_?_Z"
# Skipped: a template argument's value (`Li1E`, `Lb0E`), a reference to a name or a
# template parameter met before (`S_`, `S5_`, `T0_`).
_SKIPPED = re.compile(r"L[a-z]n?\d*E|[ST][0-9A-Z]*_")
_NUMBER = re.compile(r"\d+")


def short_mangled(name: str) -> str | None:
    """The function's name and the first name among its template arguments (None: not
    a mangled name this reads)."""
    start = re.match(MANGLED, name)
    if start is None:
        return None
    names, ends = _names(name, start.end())
    if not names:
        return None
    # The function's own name: the last of the names that open the symbol, each
    # followed by the next name, by `I` (its template arguments) or by `E` (its end).
    last = 0
    while last + 1 < len(names) and ends[last] == _start_of(name, ends[last]):
        last += 1
    own = names[last]
    after = ends[last]
    if after < len(name) and name[after] == "I" and last + 1 < len(names):
        return f"{own}<{names[last + 1]}…>"
    return own


def _start_of(name: str, at: int) -> int:
    """`at` where a name (its length) starts there, else -1."""
    return at if at < len(name) and name[at].isdigit() else -1


def _names(name: str, at: int) -> tuple[list[str], list[int]]:
    """The names written in the symbol from `at`, in order, and where each ends, up to
    the first that cannot be read."""
    names: list[str] = []
    ends: list[int] = []
    while at < len(name):
        skipped = _SKIPPED.match(name, at)
        number = _NUMBER.match(name, at)
        if skipped is not None:
            at = skipped.end()
        elif number is not None:
            end = number.end() + int(number.group())
            text = name[number.end() : end]
            if end > len(name) or not text.isidentifier():
                return names, ends
            names.append(text)
            ends.append(end)
            at = end
        else:
            at += 1
    return names, ends
