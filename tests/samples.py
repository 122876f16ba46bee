"""The sample exports of sample_reports/: a tiny GPT-2 training run and its inference run.

Many test modules read the samples' outputs; `attributed_sample` attributes each
sample once per test session and gives every caller its own copy (attribution
is deterministic and its outputs do not name their folder), so that the fast
tier does not run the same attribution a dozen times.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from nsysmap.flow.verbs import analyse_file

SAMPLES = Path(__file__).resolve().parents[1] / "sample_reports"
SAMPLE_RUNS = ("train", "infer")
_PRISTINE: dict[str, Path] = {}  # sample run -> its outputs, attributed once per session


def _pristine(name: str) -> Path:
    if name not in _PRISTINE:
        root = Path(tempfile.mkdtemp(prefix=f"nsysmap-sample-{name}-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        analyse_file(SAMPLES / f"gpt2_tiny_{name}.sqlite", root / name)
        _PRISTINE[name] = root / name
    return _PRISTINE[name]


def attributed_sample(name: str, out: Path) -> Path:
    """`nsysmap attribute` of sample run `name` ("train" or "infer") into the
    folder `out`, as a copy of the session's one attribution of it."""
    shutil.copytree(_pristine(name), out, dirs_exist_ok=True)
    return out


def analyse_samples(root: Path) -> dict[str, Path]:
    """Attribute both sample exports into `root`/train and `root`/infer: the output
    folders, by run name."""
    return {name: attributed_sample(name, root / name) for name in SAMPLE_RUNS}
