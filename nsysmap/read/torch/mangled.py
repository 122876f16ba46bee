"""A short name for a kernel that a trace names by its mangled C++ symbol (pure).

torch.profiler traces of ROCm runs name some kernels by their Itanium-mangled
symbol, hundreds of characters long (Composable Kernel's
`_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePass...`),
where CUDA traces give a demangled name. Cut to a table's width, such a name
keeps only its first characters, and the kernel it runs (`Rmsnorm2dFwd`) is in
its template arguments. `short_mangled` reads the function's name (the last
name of `N...E`, or the one name after `_Z`; each name is written as its
length and its characters) and the first name among its template arguments
(`I...E` right after it), never the parameter types that follow:

    _ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27...   ->  kentry<Rmsnorm2dFwd…>
    _ZN2at6native18elementwise_kernelEv                ->  elementwise_kernel
    _Z14vectorAdd_fp32PfS_S_i                         ->  vectorAdd_fp32
    _Z11gemm_kernel10GemmParams                       ->  gemm_kernel
    _ZN3foo3barIN5other3BazEEEvv                      ->  bar<Baz…>

It is no demangler: it gives None for what it cannot read, and the caller
keeps the name it had.
"""

from __future__ import annotations

import re

# What a mangled name starts with: `_Z` (or `__Z`), an `L` for internal linkage, then
# a nested name (`N`) or a name's length.
MANGLED = r"^_?_ZL?[N0-9]"
_START = re.compile(r"_?_ZL?", re.ASCII)
_LENGTH = re.compile(r"[0-9]{1,5}", re.ASCII)  # a name's length (a longer one: unread)
# A literal of a built-in type (`Li1E`, `Lb0E`, `Lln5E`), a reference to a name met
# before (`S_`, `S5_`, `St`, `Sa`), a template parameter (`T_`, `T0_`).
_SKIPPED = re.compile(r"L[a-z]n?[0-9]*E|S[0-9A-Z]{0,8}_|S[tabsiod]|T[0-9A-Z]{0,8}_", re.ASCII)
_QUALIFIERS = re.compile(r"[rVKRO]*", re.ASCII)  # a nested name's cv- and ref-qualifiers
_BUILTIN = re.compile(r"DF[0-9]+[b_x]?|D[a-z]|[a-z]", re.ASCII)  # `f`, `Dh`, `DF16b`
_VALUE = re.compile(r"n?[0-9]*E", re.ASCII)  # a literal's value and its E


class _Unread(Exception):
    """The symbol holds what this reader does not read."""


def short_mangled(name: str) -> str | None:
    """The function's name and the first name among its template arguments (None: not
    a mangled name this reads)."""
    start = _START.match(name)
    if start is None or re.match(MANGLED, name) is None:
        return None
    try:
        own, arguments = _function(name, start.end())
    except (_Unread, RecursionError):  # RecursionError: types nested thousands deep
        return None
    return f"{own}<{arguments}…>" if arguments else own


def _function(text: str, at: int) -> tuple[str, str | None]:
    """(the function's name, the first name of its template arguments or None)."""
    if text[at] != "N":
        name, at = _name(text, at)
        templated = at < len(text) and text[at] == "I"
        return name, _first_argument(text, at)[0] if templated else None
    at = _QUALIFIERS.match(text, at + 1).end()  # type: ignore[union-attr]
    own: str | None = None
    arguments: str | None = None
    while not _is(text, at, "E"):
        if _is(text, at, "I"):
            arguments, at = _first_argument(text, at)
        elif (skipped := _SKIPPED.match(text, at)) is not None:
            at, arguments = skipped.end(), None
        else:
            own, at = _name(text, at)
            arguments = None
    if own is None:
        raise _Unread
    return own, arguments


def _is(text: str, at: int, char: str) -> bool:
    if at >= len(text):
        raise _Unread
    return text[at] == char


def _name(text: str, at: int) -> tuple[str, int]:
    """The name written at `at` (its length, then its characters) and where it ends."""
    length = _LENGTH.match(text, at)
    if length is None:
        raise _Unread
    end = length.end() + int(length.group())
    name = text[length.end() : end]
    if end > len(text) or not name.isascii() or not name.isidentifier():
        raise _Unread
    return name, end


def _first_argument(text: str, at: int) -> tuple[str | None, int]:
    """The first name among the template arguments `I...E` at `at` (a nested name's
    last; literals, references and built-in types have none), and where they end."""
    at += 1  # the I
    first: str | None = None
    while not _is(text, at, "E"):
        found, at = _argument(text, at)
        first = first or found
    return first, at + 1


def _argument(text: str, at: int) -> tuple[str | None, int]:
    """One template argument at `at`: its name (a nested name's last) or None, and
    where it ends."""
    if (skipped := _SKIPPED.match(text, at)) is not None:  # and a template's arguments
        at = skipped.end()
        templated = at < len(text) and text[at] == "I"
        return None, _first_argument(text, at)[1] if templated else at
    char = text[at]
    if char.isdigit():
        name, at = _name(text, at)
        if _is(text, at, "I"):  # a template's arguments: its own name is the one
            at = _first_argument(text, at)[1]
        return name, at
    if char in "NJ":  # a nested name; an argument pack
        last: str | None = None
        at = _QUALIFIERS.match(text, at + 1).end()  # type: ignore[union-attr]
        while not _is(text, at, "E"):
            found, at = _argument(text, at)
            last = found or last
        return (last if char == "N" else None), at + 1
    if char == "L":  # a literal of a named type (an enum): its type, value and E
        _, at = _argument(text, at + 1)
        value = _VALUE.match(text, at)
        if value is None:
            raise _Unread
        return None, value.end()
    if char in "PRKV":  # a pointer, a reference, a qualifier: the type after it
        return None, _argument(text, at + 1)[1]
    if (builtin := _BUILTIN.match(text, at)) is not None:  # `f`, `i`, `Dh`, `DF16b`
        return None, builtin.end()
    raise _Unread
