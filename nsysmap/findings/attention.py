"""Rule unfused_attention: attention computed as separate score, softmax and matmul kernels.

An attention module (its class says `attention` or `attn`: `GPT2Attention`)
whose own operations include a softmax and no fused attention kernel
(category `attention`: FlashAttention, cuDNN or memory-efficient SDPA)
computes its scores, mask, softmax and weighted sum one kernel at a time.
`scaled_dot_product_attention` runs the same as one fused kernel, so what
goes is at most the non-matmul time there (softmax, masking, scaling,
dropout, copies); the matmuls' own time is not counted. Without modules, a
user range named for attention (`scaled dot product attention`) stands for
the module; PyTorch's operator ranges never do.
"""

from __future__ import annotations

import re

import polars as pl

from nsysmap.attribution.module_names import layer_path
from nsysmap.attribution.paths import PATH_SEPARATOR
from nsysmap.core.inert import markdown_code
from nsysmap.findings.finding import MEDIUM, Finding, Rule, claims_of
from nsysmap.findings.inputs import BUSY_KEYS, Inputs, total_ns
from nsysmap.findings.phrases import ms, path_text, pct, share

ATTENTION = r"(?i)attention|attn"
MATMUL = ("gemm", "attention")
# Range names that are no user's attention range: PyTorch's operators, nsysmap's own.
NOT_USER = re.compile(r"^(?:aten::|autograd::|nsysmap:|cuda|nccl|c10d::)")


def attention_ops(x: Inputs) -> pl.DataFrame:
    """The measured operations of attention modules (else of attention ranges), with the
    place each belongs to (`place`: a layer path, or a range path) and its kind."""
    ops = x.measured().select(*BUSY_KEYS, "module_class", "range_path", "dur_ns", "kind")
    modules = ops.select("module", "module_class").unique().collect()  # a layer per module once
    attention = modules.filter(pl.col("module_class").str.contains(ATTENTION).fill_null(False))
    places = attention.select("module", "module_class", place=layer_path("module"))
    by_module = (
        ops.join(places.lazy(), on=["module", "module_class"], how="inner")
        .with_columns(by=pl.lit("module"))
        .collect()
    )
    if by_module.height:
        return by_module
    paths = (
        ops.filter(pl.col("range_path").str.contains(ATTENTION).fill_null(False))
        .select("range_path")
        .unique()
        .collect()
    )
    prefixes = {p: _attention_range(p) for p in paths["range_path"].to_list()}
    named = pl.DataFrame(
        {"range_path": list(prefixes), "place": list(prefixes.values())},
        schema={"range_path": pl.String, "place": pl.String},
    )
    joined = ops.join(named.lazy(), on="range_path", how="inner")
    return joined.filter(pl.col("place").is_not_null()).with_columns(by=pl.lit("range")).collect()


def _attention_range(path: str) -> str | None:
    """The path down to its outermost user range named for attention, or None."""
    names = path.split(PATH_SEPARATOR)
    for i, name in enumerate(names):
        if re.search(ATTENTION, name) and not NOT_USER.match(name):
            return path_text(PATH_SEPARATOR.join(names[: i + 1]))
    return None


def unfused_attention(x: Inputs, rule: Rule) -> list[Finding]:
    """One finding per device and attention layer (or range) that runs unfused."""
    if not x.has("softmax"):
        return []
    ops = attention_ops(x)
    out = []
    for (device, place), rows in ops.group_by("device_id", "place", maintain_order=True):
        cats = rows["category"]
        if not (cats == "softmax").any() or (cats == "attention").any():
            continue
        finding = _finding(x, rule, device, place, rows)
        if finding is not None:
            out.append(finding)
    return sorted(out, key=lambda f: (f.device_id or 0, f.module or f.range_path or ""))


def _finding(x: Inputs, rule: Rule, device: int, place: str, rows: pl.DataFrame) -> Finding | None:
    steps, step_ns = x.step_count(device), x.step_ns(device)
    rest = rows.filter(~pl.col("category").is_in(MATMUL))
    saving = total_ns(rest, "dur_ns")
    if rule.below_min_share(x, device, saving):
        return None
    by_module = rows["by"][0] == "module"
    classes = sorted(set(rows["module_class"].drop_nulls().to_list()))
    softmax = total_ns(rows.filter(pl.col("category") == "softmax"), "dur_ns")
    matmul = total_ns(rows.filter(pl.col("category").is_in(MATMUL)), "dur_ns")
    named = ", ".join(markdown_code(c) for c in classes)
    what = f"{markdown_code(place)} ({named})" if by_module else f"the range {markdown_code(place)}"
    evidence = (
        f"{what} runs attention unfused: softmax kernels {ms(softmax / steps)}, other "
        f"non-matmul work {ms((saving - softmax) / steps)} and matmuls {ms(matmul / steps)}"
        f"{x.per}, no fused attention kernel; the non-matmul part is "
        f"{pct(share(saving / steps, step_ns))} of {x.the_step}"
    )
    wanted = x.with_busy(rest.group_by(BUSY_KEYS).agg(want=pl.col("dur_ns").sum()))
    return Finding(
        rule=rule,
        device_id=device,
        module=place if by_module else None,
        range_path=None if by_module else place,
        place=f"{x.where(device)}, {'module' if by_module else 'range'} {markdown_code(place)}",
        evidence=evidence,
        evidence_rows=f"ops.parquet: device_id {device}, "
        + (
            f"module class matching attention, layer {markdown_code(place)}"
            if by_module
            else f"range path under {markdown_code(place)}"
        )
        + " (category softmax, no category attention)",
        basis_ns=saving,
        claims=claims_of(wanted, "busy", BUSY_KEYS, "want", "busy_ns", x.rank),
        estimate="the attention's non-matmul time (softmax, masking, scaling, dropout, copies): "
        "a fused attention kernel does that work inside its matmuls",
        confidence=MEDIUM,
        rank=x.rank,
    )
