"""The sample exports of sample_reports/: a tiny GPT-2 training run and its inference run."""

from __future__ import annotations

from pathlib import Path

from nsysmap.pipeline import analyse_file

SAMPLES = Path(__file__).resolve().parents[1] / "sample_reports"
SAMPLE_RUNS = ("train", "infer")


def analyse_samples(root: Path) -> dict[str, Path]:
    """Attribute both sample exports into `root`/train and `root`/infer: the output
    folders, by run name."""
    for name in SAMPLE_RUNS:
        analyse_file(SAMPLES / f"gpt2_tiny_{name}.sqlite", root / name)
    return {name: root / name for name in SAMPLE_RUNS}
