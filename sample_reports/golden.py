"""Golden outputs: every output table of a sample, as CSV files that diff well."""

from __future__ import annotations

import tempfile
from pathlib import Path

import polars as pl

from nsysmap.output.writer import read_outputs
from nsysmap.pipeline import analyse_file

# Columns that depend on where the sample lives, left out of the golden files.
UNSTABLE = {"ops": ()}


def attributed_tables(report: Path) -> dict[str, pl.DataFrame]:
    """Run the whole flow on `report` and read back what it wrote."""
    with tempfile.TemporaryDirectory() as tmp:
        analyse_file(report, Path(tmp), options={"command": "attribute"})
        return read_outputs(Path(tmp))


def to_csv_frame(df: pl.DataFrame) -> pl.DataFrame:
    """Enums as strings, floats rounded: a stable text form."""
    return df.with_columns(pl.col(pl.Enum).cast(pl.String), pl.col(pl.Float64).round(9))


def write_golden(report: Path, out_dir: Path) -> None:
    """Write `<table>.csv` for every output table of `report` into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, df in attributed_tables(report).items():
        to_csv_frame(df).write_csv(out_dir / f"{name}.csv")


def read_golden(out_dir: Path, schema: pl.Schema) -> pl.DataFrame:
    """Read one golden CSV back with the given output schema's types."""
    text_schema = {k: (pl.String if isinstance(v, pl.Enum) else v) for k, v in schema.items()}
    return pl.read_csv(out_dir, schema=text_schema)
