"""`nsysmap attribute FILE` checks the path once and probes an nsys export once.

Whole, by process and by time window alike: the path passes `regular_file`
once (the table of input kinds, before the hash reads the file), and the
export's tables and columns are probed once (`nsys_probe.probe`): every read
after that, the sizing, the processes, the cuts and each part, is given the
export opened then (nsysmap.sources.choose).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devtools.synth.bulk import write_export
from devtools.synth.tile import gpt_tables
from nsysmap.core.timings import Stages
from nsysmap.flow.verbs import analyse_file
from nsysmap.read import regular_file as regular_file_module
from nsysmap.read.nsys import nsys_probe
from nsysmap.sources.choose import WINDOWS_ENV

pytestmark = pytest.mark.slow  # whole-pipeline runs
SAMPLE = Path(__file__).resolve().parents[1] / "sample_reports" / "gpt2_tiny_train.sqlite"


def counting(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts the calls of `regular_file` (wherever it is bound) and of the probe."""
    calls: Counter[str] = Counter()

    def counted(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return function(*args, **kwargs)

        return wrapper

    original = regular_file_module.regular_file
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("nsysmap") and (
            getattr(module, "regular_file", None) is original
        ):
            monkeypatch.setattr(module, "regular_file", counted("regular_file", original))
    monkeypatch.setattr(nsys_probe, "probe", counted("probe", nsys_probe.probe))
    return calls


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("walk")
    return {
        "two": write_export(folder / "two.sqlite", gpt_tables(600, seed=1, processes=2)),
        "one": write_export(folder / "one.sqlite", gpt_tables(600, seed=2, processes=1)),
    }


@pytest.mark.parametrize(
    ("case", "memory_gb", "windows", "read_as"),
    [
        ("sample", None, None, None),
        ("two", 1e-6, None, "processes_read_apart"),
        ("one", None, "3", "windows_read_apart"),
    ],
)
def test_the_path_is_checked_once_and_the_export_probed_once(
    case, memory_gb, windows, read_as, exports, tmp_path, monkeypatch
):
    path = SAMPLE if case == "sample" else exports[case]
    if windows is None:
        monkeypatch.delenv(WINDOWS_ENV, raising=False)
    else:
        monkeypatch.setenv(WINDOWS_ENV, windows)
    calls = counting(monkeypatch)
    analysis = analyse_file(
        path, tmp_path / "out", stages=Stages(progress=False), memory_gb=memory_gb
    )
    if read_as is not None:  # the walk went the way the case is about
        assert analysis.profile.meta_value(read_as) is not None
    assert calls == Counter({"regular_file": 1, "probe": 1})


def test_the_counter_sees_every_check(monkeypatch, tmp_path):
    calls = counting(monkeypatch)
    nsys_probe.open_export(SAMPLE)
    nsys_probe.open_export(SAMPLE, checked=True)
    assert calls == Counter({"regular_file": 1, "probe": 2})
