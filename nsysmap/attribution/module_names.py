"""Module paths: numbered modules collapsed into layers, blocks, and every path's ancestors.

Two namings of module paths reach ops.parquet's `module` column:

    attribute paths (nsysmap's module ranges)   transformer.h.3.attn.c_attn
    torch.profiler instance paths               GPT2Model_0.GPT2Block_3.GPT2Attention_3

A part of a path is *numbered* when it is a number (a ModuleList or
Sequential child: `h.3`, `layers.7`, `encoder.layer.0`, `blocks.2`), and an
*instance name* when it is a class name, starting with a capital letter,
followed by torch.profiler's instance number (`GPT2Block_3`,
`Qwen2DecoderLayer_7`, `SwitchTransformerBlock_3`, `Linear_0`). Attribute
names (`conv_1`, `layer_2`) are lower case and never instance names.

A *layer* (`layer_path`) is a path with every number replaced by `*`: a
numbered part becomes `*`, an instance name `Class_N` becomes `Class_*`:

    transformer.h.3.attn                      -> transformer.h.*.attn
    GPT2Model_0.GPT2Block_3.GPT2Attention_3   -> GPT2Model_*.GPT2Block_*.GPT2Attention_*

Every instance number goes, not only those of repeated siblings, because
PyTorch counts the instances of each class over the whole model in the
order it first saw them: the attention of `GPT2Block_1` is `GPT2Attention_1`
and its first Conv1D is `Conv1D_4`. The number says which instance, never
which position under its parent, so keeping it would split one layer into a
row per block. A lone `Linear_0` becomes `Linear_*`, which merges nothing;
siblings of one class under one parent (GPT-2's c_attn and c_proj, both
Conv1D) share a layer, as the trace does not name them apart (by_module
keeps every instance).

A *block* (`blocks_of`) is the outermost module of a path that is
numbered (`transformer.h.3`, `features.2`) or a repeated instance: an
instance name with a sibling of the same class under the same parent and
with modules below it (`GPT2Block_0` … `GPT2Block_11` under `GPT2Model_0`;
not the leaves `Embedding_0` and `Embedding_1`, GPT-2's wte and wpe). A
model of a single block has no repeated instance, hence no block.

The *ancestors* of a path (`with_ancestors`) are its dotted prefixes, and
for an attribute path also the root module `""` (nsysmap names the root
module `""`; a torch.profiler path starts at the root's own instance name).
"""

from __future__ import annotations

import polars as pl

ROOT = ""  # the root module of attribute paths
NUMBERED = r"^\d+$"
INSTANCE = r"^([A-Z]\w*)_\d+$"  # group 1: the class
ANY_NUMBER = "*"


def collapsed_part(part: pl.Expr) -> pl.Expr:
    """One path part with its number as `*`: `3` -> `*`, `GPT2Block_3` -> `GPT2Block_*`."""
    return part.str.replace(NUMBERED, ANY_NUMBER).str.replace(INSTANCE, "${1}_" + ANY_NUMBER)


def collapsed_instance(part: pl.Expr) -> pl.Expr:
    """One path part with an instance number as `*` (numbered parts, positions, kept)."""
    return part.str.replace(INSTANCE, "${1}_" + ANY_NUMBER)


def instance_class(part: pl.Expr) -> pl.Expr:
    """The class an instance name names (`GPT2Block_3` -> `GPT2Block`); null for other parts."""
    return part.str.extract(INSTANCE, 1)


def layer_path(column: str = "module") -> pl.Expr:
    """The layer of a module path: every numbered part `*`, every instance `Class_*`."""
    parts = pl.col(column).str.split(".")
    return parts.list.eval(collapsed_part(pl.element())).list.join(".")


def last_part(path: pl.Expr) -> pl.Expr:
    """The innermost part of a module path."""
    return path.str.split(".").list.last()


def _prefix_rows(paths: pl.DataFrame, column: str) -> pl.DataFrame:
    """One row per (path, depth 1..n): `prefix` (the path's first `depth` parts), `part`
    (its last) and `parent` (the prefix above; "" at depth 1), `parts` (n)."""
    split = pl.col(column).str.split(".")
    rows = paths.with_columns(
        _parts=split, parts=split.list.len(), depth=pl.int_ranges(1, split.list.len() + 1)
    ).explode("depth")
    return rows.with_columns(
        prefix=pl.col("_parts").list.head(pl.col("depth")).list.join("."),
        parent=pl.col("_parts").list.head(pl.col("depth") - 1).list.join("."),
        part=pl.col("_parts").list.get(pl.col("depth") - 1),
    ).drop("_parts")


def with_ancestors(frame: pl.DataFrame, column: str = "module") -> pl.DataFrame:
    """`frame` with one row per ancestor of each row's path (the path itself included),
    named in `ancestor`; rows of a null path are dropped."""
    named = frame.filter(pl.col(column).is_not_null())
    rows = _prefix_rows(named, column)
    first = instance_class(pl.col(column).str.split(".").list.first())
    at_root = named.filter((pl.col(column) != ROOT) & first.is_null())
    at_root = at_root.with_columns(prefix=pl.lit(ROOT))
    own = rows.select(*frame.columns, "prefix")
    return pl.concat([own, at_root.select(*frame.columns, "prefix")]).rename({"prefix": "ancestor"})


def blocks_of(paths: pl.Series) -> pl.DataFrame:
    """`module` -> `block` (see the module docstring; null outside every block), one row
    per distinct non-null path of `paths`."""
    distinct = pl.DataFrame({"module": paths.cast(pl.String)}).drop_nulls().unique()
    rows = _prefix_rows(distinct, "module")
    inner = rows.filter(pl.col("depth") < pl.col("parts")).select("prefix").unique()
    nodes = (
        rows.select("prefix", "parent", "part")
        .unique("prefix")
        .join(inner.with_columns(inner=pl.lit(True)), on="prefix", how="left")
        .with_columns(cls=instance_class(pl.col("part")), inner=pl.col("inner").fill_null(False))
    )
    repeated = (pl.len().over("parent", "cls") > 1) & pl.col("cls").is_not_null() & pl.col("inner")
    candidates = nodes.filter(pl.col("part").str.contains(NUMBERED) | repeated)
    outermost = (
        rows.join(candidates.select("prefix"), on="prefix", how="semi")
        .sort("depth")
        .group_by("module")
        .agg(pl.col("prefix").first().alias("block"))
    )
    return distinct.join(outermost, on="module", how="left")


def with_block(frame: pl.DataFrame, column: str = "module") -> pl.DataFrame:
    """`frame` with `block`: the block its `column` path lies in (null when none)."""
    blocks = blocks_of(frame[column]).rename({"module": column})
    return frame.join(blocks, on=column, how="left")


def block_index(block: pl.Expr) -> pl.Expr:
    """A block's number: `transformer.h.3` -> 3, `GPT2Model_0.GPT2Block_3` -> 3."""
    return block.str.extract(r"(\d+)$").cast(pl.Int64)


def block_list(block: pl.Expr) -> pl.Expr:
    """A block's path without its number: the list it is in (blocks sort by list, then index)."""
    return block.str.replace(r"\.?\d+$", "")
