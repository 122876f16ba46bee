"""Short kernel labels that still tell kernels apart, for the Markdown and the HTML report.

CUDA kernel names from PyTorch are C++ signatures hundreds of characters long,
and many share their head (`void at::native::elementwise_kernel<(int)128, ...`)
and differ only deep inside their template arguments. `kernel_label` keeps
what tells them apart:

    void at::native::elementwise_kernel<(int)128, (int)2, void at::native::
      gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float,
      at::native::binary_internal::MulFunctor<float>>>(...)::[lambda(int) ...]>(int, T3)
    ->  elementwise_kernel<…BinaryFunctor<float…MulFunctor…>

namespaces, casts, parameter lists and lambdas are dropped; a label still too
long keeps the kernel's own name and the names inside its template arguments
(functors, operations, types), without the numbers and PyTorch's wrappers.
`kernel_labels` gives different names different labels (widening the ones
that clash, at worst to the cleaned name), equal names equal labels.
"""

from __future__ import annotations

import re

from nsysmap.report.html.names import ELLIPSIS, distinct_labels, middle

WIDTH = 60
# Removed before anything else: C-style casts of template values, lambdas,
# call operators, anonymous namespaces, then every namespace qualifier.
_DROP = (
    r"\((?:unsigned |signed )?(?:int|long|long long|short|char|bool|float|double)\)",
    r"::\[lambda[^\]]*\]|::\{lambda[^}]*\}",
    r"::operator ?\(\) ?\(\)(?: const)?",
    r"\bvoid ",
    r"\(anonymous namespace\)::|<unnamed>::",
    r"\b[A-Za-z_]\w*::",
)
# Names inside template arguments that say nothing about what the kernel does.
WRAPPERS = frozenset(
    {
        "void",
        "const",
        "unsigned",
        "signed",
        "int",
        "long",
        "short",
        "char",
        "bool",
        "size_t",
        "array",
        "instance",
        "lambda",
        "operator",
        "gpu_kernel_impl",
        "gpu_kernel_impl_nocast",
        "func_wrapper_t",
        "TensorIteratorBase",
        "OffsetCalculator",
        "LoadWithoutCast",
        "StoreWithoutCast",
        "LoadWithCast",
        "StoreWithCast",
    }
)
_NAME = re.compile(r"\b[A-Za-z_]\w*")
_TYPE_PARAM = re.compile(r"^T\d*$")


def clean(name: str) -> str:
    """The name without `void`, namespaces, casts, lambdas and parameter lists."""
    text = name.strip()
    for pattern in _DROP:
        text = re.sub(pattern, "", text)
    text = _without_parameters(text)
    text = re.sub(r"\s+([*&>,])", r"\1", text)  # `char *` and `> >` written alike
    return re.sub(r"\s+", " ", text).strip()


def _without_parameters(text: str) -> str:
    """`text` without any parenthesised list that follows a name or a `>` (calls)."""
    out: list[str] = []
    depth = 0
    for i, char in enumerate(text):
        if char == "(" and (depth or (i and (text[i - 1].isalnum() or text[i - 1] in "_>"))):
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        elif not depth:
            out.append(char)
    return "".join(out)


def kernel_label(name: str, width: int = WIDTH) -> str:
    """One kernel's label, at most `width` characters (see the module's docstring)."""
    text = clean(name) or name.strip() or "?"
    if len(text) <= width:
        return text
    cut = text.find("<")
    if cut <= 0:
        return middle(text, width)
    head, kept = text[:cut], _inner_names(text[cut:])
    while kept:
        label = f"{head}<{ELLIPSIS}{ELLIPSIS.join(kept)}{ELLIPSIS}>"
        if len(label) <= width:
            return label
        kept = kept[1:]  # the innermost names (last) tell most: drop from the front
    return middle(text, width)


def _inner_names(arguments: str) -> list[str]:
    """The telling names in template arguments, in order, each once."""
    seen: list[str] = []
    for found in _NAME.findall(arguments):
        if found in WRAPPERS or _TYPE_PARAM.match(found) or found in seen:
            continue
        seen.append(found)
    return seen


def kernel_labels(names: list[str], width: int = WIDTH) -> list[str]:
    """A label per name; different names never share one (clashing ones are widened)."""
    labels = {name: kernel_label(name, width) for name in dict.fromkeys(names)}
    owners: dict[str, list[str]] = {}
    for name, label in labels.items():
        owners.setdefault(label, []).append(name)
    for group in owners.values():
        if len(group) > 1:
            labels.update(zip(group, _apart(group, width), strict=True))
    return [labels[name] for name in names]


def _apart(group: list[str], width: int) -> list[str]:
    """Labels for names whose labels clash: wider ones first, else cut in the middle."""
    cleaned = [clean(n) or n for n in group]
    if len(set(cleaned)) < len(group):  # alike once cleaned: numbered in order
        shared = kernel_label(group[0], width)
        return [f"{shared} [{i}]" for i in range(1, len(group) + 1)]
    for wider in (width + 20, width + 40):
        labels = [kernel_label(n, wider) for n in group]
        if len(set(labels)) == len(group):
            return labels
    labels = _where_they_differ(cleaned, width)
    return labels if len(set(labels)) == len(group) else distinct_labels(cleaned, width)


def _where_they_differ(texts: list[str], width: int) -> list[str]:
    """Each text's head, then the window of it where the texts start to differ."""
    same = next(
        (i for i, chars in enumerate(zip(*texts, strict=False)) if len(set(chars)) > 1),
        min(len(t) for t in texts),
    )
    head = min(same, width // 4)
    start = max(same - width // 4, head)
    return [
        text
        if len(text) <= width
        else text[:head] + ELLIPSIS * (start > head) + text[start:][: width - head - 2] + ELLIPSIS
        for text in texts
    ]
