"""Hostile names: a profile whose kernels, ranges, modules and device carry markup and
control characters, for checking that every renderer shows them as data.

`NAMES` is the corpus: HTML that runs a script, Plotly's markup (links, styles),
Markdown that breaks tables or injects headings, terminal control sequences,
strings that break JSON, bidi and zero-width characters, a very long name.
`hostile_export(path)` writes a synthetic nsys export (devtools.synth's builder)
of three training steps whose kernels, user ranges, module classes and paths,
and GPU name are these names; `hostile_trace(path)` writes a torch.profiler
trace whose operators, modules, annotations and kernels are;
`hostile_outputs(root)` runs every command of nsysmap that renders names on
both (attribute, report --html, diff --html, export --perfetto).

Every script in the corpus sets `window.pwned`, every link points into
`pwned.invalid`, every style makes text 300px tall: a page that shows them as
data has none of these.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.synth.builder import SynthExport
from nsysmap.core.errors import ExitCode
from tests.cli_runner import invoke

SCRIPT_SVG = "<svg onload=\"window.pwned='svg'\">"
SCRIPT_IMG = "<img src=pwned-missing.png onerror=\"window.pwned='img'\">"
SCRIPT_TAG = "</script><script>window.pwned='script'</script>"
LINK = '<a href="https://pwned.invalid/a">click me</a>'
STYLE = '<span style="font-size:300px">BIG</span>'
PLOTLY = "<b>bold</b><br><i>it</i><sup>up</sup> &lt;entity&gt; %{x}"
MD_TABLE = "pipe|in|name\n# Injected heading\n- item"
MD_TICKS = "back`tick``s``` ` "
MD_LINKS = (
    "[click](javascript:window.pwned='md') ![img](pwned-missing.png) "
    "<https://pwned.invalid/auto> https://pwned.invalid/bare *emph* <!-- open comment"
)
TERMINAL = "\x1b]0;pwned-title\x07\x1b[31mred\x1b[0m\rover\x08\x9b2J"
JSON_BREAK = '"quote" back\\slash \\u0041 \u2028line\u2029sep </script><!--'
BIDI = "\u202eevil\u202c zero\u200bwidth\ufeff\u2066iso\u2069"
LONG = "very_long_kernel_" + "x" * 20_000

NAMES = {
    "script_svg": SCRIPT_SVG,
    "script_img": SCRIPT_IMG,
    "script_tag": SCRIPT_TAG,
    "link": LINK,
    "style": STYLE,
    "plotly": PLOTLY,
    "md_table": MD_TABLE,
    "md_ticks": MD_TICKS,
    "md_links": MD_LINKS,
    "terminal": TERMINAL,
    "json": JSON_BREAK,
    "bidi": BIDI,
    "long": LONG,
}
# Characters no renderer but JSON may write as they are: C0 and C1 controls, DEL,
# bidi controls, zero-width characters, line and paragraph separators.
CONTROLS = frozenset(
    [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))]
    + list("\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e")
    + list("\u2066\u2067\u2068\u2069\ufeff\u2028\u2029")
)
# What marks a name as having run or styled anything in a page.
MARKERS = ("pwned.invalid", "window.pwned", "font-size:300px")
# The device name: the GPU row of the export and the torch trace.
DEVICE = f"GPU {SCRIPT_SVG} {TERMINAL}"
# `nsysmap diff --fail-above`: every module and kernel of B is slower than A's.
GATED = ("--by", "module", "--by", "kernel")
# Module classes: no ':' (the range grammar ends the class at the first one).
CLASSES = {key: name for key, name in NAMES.items() if ":" not in name and key != "long"}


def _kernels(step: int) -> list[tuple[str, float]]:
    """(kernel name, ms) of one step, every name of the corpus, the longest first."""
    return [(f"{name} k", 0.9 - 0.05 * i + 0.01 * step) for i, name in enumerate(NAMES.values())]


def hostile_export(path: Path, *, steps: int = 3, slower: float = 0.0) -> Path:
    """Three training steps (forward, backward, optimizer) of a two-block model whose
    modules, classes, user ranges, kernels and GPU carry the corpus's names; `slower`
    (ms) lengthens every kernel (a second run for `nsysmap diff`)."""
    b = SynthExport()
    b.gpu(0, DEVICE)
    b.thread(1, 1, "python")
    clock = [0.0]
    corr = [0]

    def kernel(name: str, dur: float) -> None:
        corr[0] += 1
        start = clock[0]
        b.launch(1, 1, start, start + 0.01, corr[0])
        b.kernel(1, 0, 7, start + 0.02, start + 0.02 + dur + slower, corr[0], name=name)
        clock[0] = start + 0.05 + dur + slower

    def within(name: str, body: Any) -> None:
        start = clock[0]
        clock[0] += 0.01
        body()
        clock[0] += 0.01
        b.range(1, 1, start, clock[0], name)

    for step in range(steps):
        within(f"nsysmap:step:{step}", lambda s=step: _step(b, kernel, within, s))
    return b.write(path)


def _step(b: SynthExport, kernel: Any, within: Any, step: int) -> None:
    names = _kernels(step)
    keys = list(CLASSES)

    def forward() -> None:
        for block in (0, 1):
            path = f"transformer.h.{block}"

            def body(block: int = block, path: str = path) -> None:
                for i, key in enumerate(keys):
                    if i % 2 != block:
                        continue
                    leaf = f"{path}.{NAMES[key]}"
                    name, ms = names[i]
                    within(
                        f"nsysmap:fwd:{CLASSES[key]}:{leaf}",
                        lambda n=name, t=ms: within(n, lambda: kernel(n, t)),
                    )

            within(f"nsysmap:fwd:Block {CLASSES['script_svg']}:{path}", body)
        for name, ms in names[len(keys) :]:
            within(name, lambda n=name, t=ms: kernel(n, t))

    def backward() -> None:
        for i, key in enumerate(keys):
            leaf = f"transformer.h.{i % 2}.{NAMES[key]}"
            name, ms = names[i]
            within(f"nsysmap:bwd:{CLASSES[key]}:{leaf}", lambda n=name, t=ms: kernel(n, 2 * t))

    within("nsysmap:phase:forward", lambda: within("nsysmap:fwd:Model:", forward))
    within("nsysmap:phase:backward", backward)
    within("nsysmap:phase:optimizer", lambda: kernel(f"{TERMINAL} optimizer", 0.2))


def hostile_trace(path: Path) -> Path:
    """A torch.profiler trace of one step whose annotations, modules, operators and
    kernels carry the corpus's names (times in µs)."""
    events: list[dict[str, Any]] = [_event("user_annotation", "ProfilerStep#0", 0, 100_000, 100)]
    events.append(_event("user_annotation", f"{LINK} forward", 10, 90_000, 100))
    for i, (key, name) in enumerate(NAMES.items()):
        t, corr = 20 + 6_000 * i, i + 1
        module = _event("python_function", f"nn.Module: {name}", t, 5_000, 100, **_module(i, t))
        operator = _event("cpu_op", f"aten::{key} {name}", t + 10, 4_000, 100, External_id=corr)
        launch = _event("cuda_runtime", "cudaLaunchKernel", t + 20, 10, 100, correlation=corr)
        gpu = {"device": 0, "stream": 7, "correlation": corr, "External_id": corr}
        kernel = _event("kernel", f"{name} k", t + 100, 3_000 - 100 * i, 7, pid=0, **gpu)
        events += [module, operator, launch, kernel]
    device = {"id": 0, "name": DEVICE, "totalGlobalMem": 85031714816, "computeMajor": 9}
    device |= {"computeMinor": 0, "numSms": 132}
    doc = {"schemaVersion": 1, "deviceProperties": [device], "traceEvents": events}
    path.write_text(json.dumps(doc))
    return path


def _module(i: int, ts: int) -> dict[str, Any]:
    return {"Python id": ts, "Python module id": i}


def _event(cat: str, name: str, ts: int, dur: int, tid: int, pid: int = 1, **args: Any) -> dict:
    """A complete event; `args` keys with `_` for a space (`External_id`)."""
    spaced = {key.replace("_", " "): value for key, value in args.items()}
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": spaced}  # fmt: skip


@dataclass(frozen=True)
class Outputs:
    """The hostile runs' outputs under `root`: A and B (the export, twice), T (the
    trace), diff.html, A.json (Perfetto), and what each command printed."""

    root: Path
    texts: dict[str, str]  # stdout and stderr together, by command


def hostile_outputs(root: Path) -> Outputs:
    """Every command that renders names, run on the hostile export and trace."""
    hostile_export(root / "a.sqlite")
    hostile_export(root / "b.sqlite", slower=0.1)
    hostile_trace(root / "t.json")
    commands: dict[str, list[Any]] = {
        "attribute_a": ["attribute", root / "a.sqlite", "-o", root / "A"],
        "attribute_b": ["attribute", root / "b.sqlite", "-o", root / "B", "--quiet"],
        "attribute_t": ["attribute", root / "t.json", "-o", root / "T"],
        "report_a": ["report", root / "A", "--html"],
        "report_t": ["report", root / "T", "--html"],
        "diff": ["diff", root / "A", root / "B", "--html", root / "diff.html"],
        "export": ["export", root / "A", "--perfetto", root / "A.json"],
        "gate": ["diff", root / "A", root / "B", "--quiet", "--fail-above", "1", *GATED],
    }
    texts = {}
    for key, argv in commands.items():
        code, out, err = invoke(argv)
        if code != (ExitCode.REGRESSION if key == "gate" else 0):
            raise AssertionError(f"nsysmap {key} exited with {code}: {err}")
        texts[key] = out + err
    return Outputs(root, texts)
