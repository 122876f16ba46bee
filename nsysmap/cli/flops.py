"""`nsysmap flops`: FLOPs per module of one training step, counted without a GPU.

Runs `python -m instrument.flops` (torch lives there, never in nsysmap), then
prints the per-module table and the totals, or with --json the document.
"""

from __future__ import annotations

import json
from typing import Any

import click
import polars as pl

from nsysmap.flops import module_flops as flops


def _counter_options(**opts: Any) -> list[str]:
    """The command line of `python -m instrument.flops` for these options."""
    chosen = [name for name in ("gpt2", "config", "factory") if opts[name]]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --gpt2, --config, --factory")
    args = [f"--{chosen[0]}", opts[chosen[0]]]
    for name in (
        "batch",
        "seq",
        "vocab",
        "attn",
        "dropout",
        "logits",
        "input_shape",
        "input_dtype",
    ):
        if opts[name] is not None:
            args += [f"--{name.replace('_', '-')}", str(opts[name])]
    return args + (["--no-backward"] if opts["no_backward"] else [])


@click.command("flops")
@click.option("--gpt2", metavar="SIZE", help="GPT-2 preset: tiny, small, medium, large, xl.")
@click.option("--config", metavar="JSON", help="Hugging Face config: inline JSON or a file.")
@click.option("--factory", metavar="MODULE:CALLABLE", help="A callable returning an nn.Module.")
@click.option("--batch", type=int, default=1, show_default=True)
@click.option("--seq", type=int, default=1024, show_default=True)
@click.option("--vocab", type=int, help="Vocabulary size (--gpt2, --config), e.g. 50304.")
@click.option("--attn", type=click.Choice(["sdpa", "eager"]), default="sdpa", show_default=True)
@click.option("--dropout", type=float, help="Dropout of the GPT-2 presets (default 0).")
@click.option("--logits", type=click.Choice(["all", "last"]), default="all", show_default=True)
@click.option("--input-shape", help="Comma-separated input sizes instead of batch,seq.")
@click.option("--input-dtype", help="Input dtype (default int64: token ids).")
@click.option("--no-backward", is_flag=True, help="Count the forward only.")
@click.option("--python", "python", metavar="PATH", help="Interpreter with torch installed.")
@click.option(
    "--depth", type=int, default=3, show_default=True, help="Module rows down to this depth."
)
@click.option("--self", "exclusive", is_flag=True, help="Per-module counts without submodules.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document instead.")
def flops_command(
    python: str | None, depth: int, exclusive: bool, as_json: bool, **opts: Any
) -> None:
    """Count FLOPs and operator shapes per module on fake tensors (no GPU, no weights)."""
    doc = flops.count(_counter_options(**opts), python=python)
    table = flops.flops_table(doc)
    if as_json:
        click.echo(json.dumps(doc))
        return
    modules = flops.module_table(doc)
    click.echo(_header(doc))
    per_module = flops.by_module(table, modules, inclusive=not exclusive)
    click.echo(_module_lines(per_module.filter(pl.col("depth") <= depth), exclusive))
    click.echo(_total_lines(table, flops.by_module(table, modules, inclusive=True)))


def _header(doc: dict[str, Any]) -> str:
    attention = doc.get("attn_implementation") or "-"
    return (
        f"{doc.get('model', '?')}: {doc['model_class']}, {doc['parameters']:,} parameters; "
        f"input {doc['input_shape']} {doc['input_dtype']}; attention {attention}; "
        f"logits {doc['logits']}; counted on fake tensors in {doc['count_seconds']} s "
        f"(torch {doc['torch_version']})\n"
    )


_UNITS = ((1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP"), (1.0, "FLOP"))
_FLOP_COLUMNS = [
    "forward_matmul_flop",
    "backward_matmul_flop",
    "forward_other_flop_estimate",
    "backward_other_flop_estimate",
]


def _module_lines(per_module: pl.DataFrame, exclusive: bool) -> str:
    largest = per_module.select(pl.max_horizontal(pl.col(_FLOP_COLUMNS).max())).item() or 0
    scale, unit = next((s, u) for s, u in _UNITS if largest >= 10 * s or s == 1.0)
    scope = "own operators only" if exclusive else "submodules included"
    lines = [
        f"{unit} per module ({scope}; matmul exact, other ≈ estimate)",
        f"{'module':<44} {'class':<18} {'fwd matmul':>12} {'bwd matmul':>12} "
        f"{'fwd other≈':>12} {'bwd other≈':>12}",
    ]
    for row in per_module.iter_rows(named=True):
        name = ("  " * row["depth"] + (row["module"] or "(root)"))[:44]
        values = " ".join(f"{row[c] / scale:12.3f}" for c in _FLOP_COLUMNS)
        lines.append(f"{name:<44} {row['module_class'][:18]:<18} {values}")
    return "\n".join(lines) + "\n"


def _total_lines(table: pl.DataFrame, inclusive: pl.DataFrame) -> str:
    def line(label: str, forward: int, backward: int) -> str:
        return f"{label[:48]:<48} {forward:>22,} {backward:>22,}"

    lines = [f"{'FLOP (matmul-class, exact)':<48} {'forward':>22} {'backward':>22}"]
    for row in flops.repeated_blocks(inclusive).iter_rows(named=True):
        label = f"{row['parent']}: {row['blocks']} x {row['module_class']}"
        lines.append(line(label, row["forward_matmul_flop"], row["backward_matmul_flop"]))
    for row in inclusive.filter(pl.col("depth") == 1).iter_rows(named=True):
        label = f"{row['module']} ({row['module_class']})"
        lines.append(line(label, row["forward_matmul_flop"], row["backward_matmul_flop"]))
    outside = flops.by_direction(table.filter(pl.col("module").is_null()))
    totals = flops.by_direction(table)
    lines.append(line("outside every module", *outside["matmul_flop"]))
    lines.append(line("total", *totals["matmul_flop"]))
    lines.append(line("  of which attention scores recomputed", *totals["recompute_flop"]))
    lines.append(line("other operators (estimate)", *totals["other_flop_estimate"]))
    return "\n".join(lines)
