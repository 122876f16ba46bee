"""An output folder is replaced in one step, and nothing of the user's is ever lost.

`commit` swaps the output folder with a staging folder holding the new
outputs and hard links of every entry of the user's (nsysmap.output.placement),
then settles the old one; a staging folder a kill left behind is settled by
the next write into the folder (`recover`): nsysmap's own files removed, the
user's moved back, a clash kept beside as `NAME.nsysmap-kept`. Readers read
one set of outputs however often the folder is replaced meanwhile. These
are the quick checks, in-process; tests/test_output_kills.py kills real
runs at every step.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import polars as pl
import pytest

from devtools.synth import SynthExport
from nsysmap.core.errors import OutputFailed
from nsysmap.output import swap
from nsysmap.output.placement import MANIFEST_SCHEMA, commit, recover, staging
from nsysmap.output.swap import MARK, hold, release, write_mark
from nsysmap.output.writer import read_outputs
from tests.cli_runner import nsysmap_cli


def _export(path: Path, step: int = 0) -> Path:
    """One step holding one kernel: the smallest export `attribute` writes outputs for."""
    b = SynthExport()
    b.thread(10, 11, "python")
    b.range(10, 11, 0, 10, f"nsysmap:step:{step}")
    b.launch(10, 11, 1, 1.5, corr=1)
    b.kernel(10, 0, 7, 2, 4, corr=1, name="void k()")
    return b.write(path)


def _attribute(tmp: Path, out: Path, step: int = 0) -> None:
    """`nsysmap attribute` into `out` (the whole command: slow tests only)."""
    argv = ["attribute", _export(tmp / f"s{step}.sqlite", step), "-o", out, "--quiet"]
    assert nsysmap_cli(argv) == 0


def _write(_tmp: Path, out: Path, step: int = 0) -> None:
    """Outputs of step `step` put into `out` as the writer puts them (staged, committed),
    in a few milliseconds: two tables and their manifest."""
    tables = {"ops": {"step": [step, step]}, "by_step": {"step": [step]}}
    with staging(out) as folder:
        for name, columns in tables.items():
            pl.DataFrame(columns).write_parquet(folder / f"{name}.parquet")
        listed = {name: {"file": f"{name}.parquet"} for name in tables}
        manifest = {"schema": MANIFEST_SCHEMA, "tables": listed}
        (folder / "manifest.json").write_text(json.dumps(manifest))
        commit(folder, out)


def _user_files(out: Path) -> dict[str, bytes]:
    """The user's entries in `out`: a file, a nested one, a symbolic link, an empty folder."""
    (out / "notes.txt").write_text("the user's notes\n")
    (out / "sub" / "deep").mkdir(parents=True)
    (out / "sub" / "deep" / "results.csv").write_text("a,b\n1,2\n")
    (out / "empty").mkdir()
    os.symlink("notes.txt", out / "latest")
    return _tree(out)


def _tree(out: Path) -> dict[str, bytes]:
    """Every entry of `out` but nsysmap's outputs: files by content, links by target."""
    tree: dict[str, bytes] = {}
    for path in sorted(out.rglob("*")):
        name = str(path.relative_to(out))
        if path.name == "manifest.json" or path.suffix == ".parquet":
            continue
        if path.is_symlink():
            tree[name] = b"-> " + os.fsencode(os.readlink(path))
        elif path.is_dir():
            tree[name] = b"<dir>"
        else:
            tree[name] = path.read_bytes()
    return tree


def _staging_left(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".nsysmap-" in p.name)


def _steps(out: Path) -> list[int]:
    return read_outputs(out)["by_step"]["step"].unique().to_list()


# ------------------------------------------------------------ the swap
def test_a_second_run_swaps_in_new_outputs_keeping_every_user_entry(tmp_path):
    out = tmp_path / "out"
    _write(tmp_path, out)
    mine = _user_files(out)
    notes = (out / "notes.txt").stat().st_ino
    os.chmod(out, 0o750)
    os.chmod(out / "sub", 0o701)
    _write(tmp_path, out, step=7)
    assert _steps(out) == [7] and _tree(out) == mine
    assert (out / "notes.txt").stat().st_ino == notes  # the very file, not a copy
    assert stat.S_IMODE(out.stat().st_mode) == 0o750  # the folder's mode, and its folders'
    assert stat.S_IMODE((out / "sub").stat().st_mode) == 0o701
    assert _staging_left(tmp_path) == [] and not (out / MARK).exists()


def test_a_new_output_folder_takes_the_users_umask(tmp_path):
    old = os.umask(0o022)
    try:
        _write(tmp_path, tmp_path / "out")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o755  # not the staging 0700


def test_a_folder_given_through_a_link_stays_a_link(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink("real", tmp_path / "out")
    _write(tmp_path, tmp_path / "out")
    _write(tmp_path, tmp_path / "out", step=7)
    assert (tmp_path / "out").is_symlink() and _steps(tmp_path / "real") == [7]


def test_without_rename_exchange_the_folder_is_renamed_aside(tmp_path, monkeypatch):
    """Where the system cannot swap two folders: two renames, and the same result."""
    out = tmp_path / "out"
    _write(tmp_path, out)
    mine = _user_files(out)
    monkeypatch.setattr(swap, "exchange", lambda a, b: False)
    import nsysmap.output.placement as placement

    monkeypatch.setattr(placement, "exchange", lambda a, b: False)
    _write(tmp_path, out, step=7)
    assert _steps(out) == [7] and _tree(out) == mine and _staging_left(tmp_path) == []


def test_a_file_made_in_the_old_folder_during_the_swap_is_moved_into_the_new(tmp_path):
    out = tmp_path / "out"
    _write(tmp_path, out)
    real_exchange = swap.exchange

    def exchange_then_write(a: Path, b: Path) -> bool:
        (b / "late.txt").write_text("written while nsysmap swapped\n")  # b: still the old one
        (b / "notes.txt").write_text("replaced meanwhile\n")
        return real_exchange(a, b)

    (out / "notes.txt").write_text("first\n")
    import nsysmap.output.placement as placement

    placement.exchange = exchange_then_write  # type: ignore[assignment]
    try:
        _write(tmp_path, out, step=7)
    finally:
        placement.exchange = real_exchange
    assert (out / "late.txt").read_text() == "written while nsysmap swapped\n"
    # The new folder holds a link to notes.txt's inode, which was written in place: one
    # file, the latest text.
    assert (out / "notes.txt").read_text() == "replaced meanwhile\n"
    assert _staging_left(tmp_path) == []


# ------------------------------------------------------- stale staging folders
def _parquet(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame({"x": [1]}).write_parquet(path)
    return path


def test_a_staging_folder_killed_while_writing_is_removed_whole(tmp_path):
    out = tmp_path / "out"
    _write(tmp_path, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    stale = tmp_path / ".out.nsysmap-0123abcd"
    stale.mkdir()
    write_mark(stale)  # everything in it is nsysmap's: the outputs being written
    _parquet(stale / "ops.parquet")
    (stale / "by_phase.parquet").write_bytes(b"PAR1 half written")
    recover(out)
    assert _staging_left(tmp_path) == []
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_staging_folder_killed_before_the_swap_gives_back_only_the_users(tmp_path):
    """Marked with its outputs, then the user's entries linked in; a link whose
    original was removed since is moved back (nothing of the user's is lost)."""
    out = tmp_path / "out"
    _write(tmp_path, out)
    mine = _user_files(out)
    stale = tmp_path / ".out.nsysmap-0123abcd"
    stale.mkdir()
    _parquet(stale / "ops.parquet")
    (stale / "manifest.json").write_text("{}")
    write_mark(stale, ["ops.parquet", "manifest.json"])
    swap.mirror(out, stale, ["notes.txt", "sub", "latest"])
    (out / "sub" / "deep" / "results.csv").unlink()
    recover(out)
    assert _staging_left(tmp_path) == [] and _tree(out) == mine
    assert _steps(out) == [0]


def test_an_old_folder_a_kill_left_after_the_swap_gives_back_every_user_entry(tmp_path):
    """The swap happened (DIR holds the new outputs); the old folder still holds its
    outputs, a file made there meanwhile, and a file of a name DIR also holds."""
    old, out = tmp_path / "earlier", tmp_path / "out"
    _write(tmp_path, old)
    _write(tmp_path, out, step=7)
    old = old.rename(tmp_path / ".out.nsysmap-0123abcd")
    (old / "made_meanwhile.txt").write_text("late\n")
    (old / "notes.txt").write_text("old version\n")
    (out / "notes.txt").write_text("new version\n")
    os.link(out / "notes.txt", old / "same.txt")
    os.link(out / "notes.txt", out / "same.txt")
    recover(out)
    assert _staging_left(tmp_path) == []
    assert (out / "made_meanwhile.txt").read_text() == "late\n"
    assert (out / "notes.txt").read_text() == "new version\n"
    assert (out / "notes.txt.nsysmap-kept").read_text() == "old version\n"
    assert _steps(out) == [7]


def test_an_output_folder_left_missing_between_two_renames_is_the_old_one_again(tmp_path):
    aside, out = tmp_path / ".out.nsysmap-0123abcd", tmp_path / "out"
    _write(tmp_path, aside)
    mine = _user_files(aside)
    building = tmp_path / ".out.nsysmap-4567cdef"
    building.mkdir()
    _parquet(building / "ops.parquet")
    write_mark(building, ["ops.parquet"])
    swap.mirror(aside, building, ["notes.txt"])
    recover(out)
    assert _staging_left(tmp_path) == [] and _tree(out) == mine and _steps(out) == [0]


def test_a_staging_folder_in_use_is_left_alone(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    busy = tmp_path / ".out.nsysmap-0123abcd"
    busy.mkdir()
    write_mark(busy)
    lock = hold(busy)
    try:
        recover(out)
        assert busy.is_dir()
    finally:
        release(lock)
    recover(out)
    assert not busy.exists()


@pytest.mark.parametrize(
    "name",
    [
        ".out.nsysmap-0123abcd.x",
        ".out.nsysmap-0123ABCD",
        ".other.nsysmap-0123abcd",
        ".out.nsysmap-012",
    ],
)
def test_only_staging_folders_of_this_folder_are_settled(tmp_path, name):
    (tmp_path / "out").mkdir()
    other = tmp_path / name
    other.mkdir()
    (other / "ops.parquet").write_text("someone's\n")
    recover(tmp_path / "out")
    assert (other / "ops.parquet").read_text() == "someone's\n"


def test_a_failed_commit_leaves_the_old_outputs_and_no_staging(tmp_path, monkeypatch):
    out = tmp_path / "out"
    _write(tmp_path, out)
    mine = _user_files(out)

    def no_room(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(swap, "_mirror_entry", no_room)
    with pytest.raises(OutputFailed, match="No space left on device"):
        _write(tmp_path, out, step=7)
    assert _steps(out) == [0] and _tree(out) == mine
    assert _staging_left(tmp_path) == []


@pytest.mark.slow  # two whole runs of the command
def test_attribute_twice_keeps_the_users_entries_and_folder(tmp_path):
    out = tmp_path / "out"
    _attribute(tmp_path, out)
    mine = _user_files(out)
    os.chmod(out, 0o750)
    _attribute(tmp_path, out, step=7)
    assert _steps(out) == [7] and _tree(out) == mine
    assert stat.S_IMODE(out.stat().st_mode) == 0o750 and _staging_left(tmp_path) == []


# ------------------------------------------------------------- readers
def test_a_reader_reads_one_set_when_a_commit_comes_between(tmp_path, monkeypatch):
    """read_outputs opens manifest.json, then each table: a commit after its first
    table would give the old manifest with new tables; it reads again instead."""
    out = tmp_path / "out"
    _write(tmp_path, out)
    new = tmp_path / "new"
    _write(tmp_path, new, step=7)
    real, calls = pl.read_parquet, []

    def read_then_replace(source: object, *args: object, **kwargs: object) -> pl.DataFrame:
        frame = real(source, *args, **kwargs)
        calls.append(source)
        if len(calls) == 1:  # the folder is replaced right after the first table is read
            with staging(out) as folder:
                for entry in new.iterdir():
                    os.link(entry, folder / entry.name)
                commit(folder, out)
        return frame

    monkeypatch.setattr(pl, "read_parquet", read_then_replace)
    tables = read_outputs(out)
    monkeypatch.setattr(pl, "read_parquet", real)
    assert tables["by_step"]["step"].to_list() == [7]
    expected = read_outputs(new)
    assert all(tables[name].equals(expected[name]) for name in expected)


def test_a_mount_point_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    out.mkdir()
    real = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == out or real(p))
    code = nsysmap_cli(["attribute", tmp_path / "missing.sqlite", "-o", out])
    err = capsys.readouterr().err
    assert code == 10 and "is a mount point" in err and "give a folder inside it" in err


def test_a_file_removed_while_it_is_linked_is_not_an_error(tmp_path, monkeypatch):
    """Another program's file renamed over or removed in the folder while nsysmap links
    the user's entries: nothing to keep, and the swap goes on."""
    out = tmp_path / "out"
    _write(tmp_path, out)
    (out / "checkpoint.tmp").write_text("being renamed\n")
    real_link = os.link

    def link_after_it_went(src: object, dst: object, **kwargs: object) -> None:
        if Path(str(src)).name == "checkpoint.tmp":
            Path(str(src)).unlink()
        real_link(src, dst, **kwargs)

    monkeypatch.setattr(os, "link", link_after_it_went)
    _write(tmp_path, out, step=7)
    assert _steps(out) == [7] and not (out / "checkpoint.tmp").exists()
