"""Every real nsys export with GPU work, attributed whole and in three time windows
(nsysmap.sources.by_window; one process at a time, each in three windows, where several
processes have GPU work): the same tables, op ids and range ids aside
(tests/window_tables.py). Where the windows could differ, the export is read whole (one
process at a time) and says why; which exports are split and which are not is checked too."""

from __future__ import annotations

import pytest

from nsysmap.core.timings import Stages
from nsysmap.flow.verbs import analyse_file
from nsysmap.read.nsys.nsys_sqlite import gpu_processes
from nsysmap.sources.choose import WINDOWS_ENV
from tests.corpus import NO_GPU_FILES, corpus_files, corpus_path, real_profiles
from tests.window_tables import differences, windows_read_apart

pytestmark = [pytest.mark.corpus, pytest.mark.slow]
FILES = list(dict.fromkeys([*corpus_files(), *real_profiles("nsys-sqlite")]))
# Why an export is read whole however small the budget (nsysmap.read.nsys.window_cuts,
# nsysmap.sources.window_carry, nsysmap.sources.by_window.WindowCheck); every other one-process
# export is split.
NOT_SPLIT = {
    # records phase the work outside steps (no step ranges)
    "cs336a2_small_fwdbwd_emitnvtx_shapes_a100.sqlite": "outside every step",
    # pyprof's markers are never closed until the end: thousands of ranges nest
    "mmagic_vsr_pyprof_dict_nvtx_markers_a100.sqlite": "nested over 64 deep",
    # two processes; FSDP's hook ranges are paired into spans across any gap
    "fastvideo_training_mfu_h100x2_before.sqlite": "FSDP hook ranges",
}
# No moment without a range open: split only because the ranges open across each
# edge are read into the window after it (nsysmap.sources.window_carry).
CARRIED = (
    "extrap_concurrent_streams_nvtx_windows.sqlite",
    "cs336a2_small_fwd_emitnvtx_shapes_a100.sqlite",
)


@pytest.mark.parametrize("name", FILES)
def test_a_real_export_in_windows_gives_the_tables_of_the_whole(name, tmp_path, monkeypatch):
    if name in NO_GPU_FILES or not name.endswith(".sqlite"):
        pytest.skip(f"{name}: no GPU work to attribute")
    path = corpus_path(name)
    processes = gpu_processes(path)
    if processes == []:
        pytest.skip(f"{name}: no GPU work to attribute")
    several = processes is not None and len(processes) > 1
    quiet = Stages(progress=False)
    monkeypatch.delenv(WINDOWS_ENV, raising=False)
    analyse_file(path, tmp_path / "whole", stages=quiet, memory_gb=1000.0)
    monkeypatch.setenv(WINDOWS_ENV, "3")
    # Several processes are read in windows only when over the budget: a byte.
    budget = 1e-9 if several else None
    split = analyse_file(path, tmp_path / "split", stages=quiet, memory_gb=budget)
    refused = split.profile.meta_value("windows_refused")
    windows = split.profile.meta_value("windows_read_apart")
    if several:
        assert split.profile.meta_value("processes_read_apart") == str(len(processes))
    if name in NOT_SPLIT:
        assert refused is not None and NOT_SPLIT[name] in refused and windows is None
    else:
        assert refused is None and windows is not None and int(windows) >= 2
    if name in CARRIED:
        plan = windows_read_apart(path, None)
        assert plan is not None and all(n > 0 for n in plan.carried[1:])
    assert differences(tmp_path / "whole", tmp_path / "split") == []
