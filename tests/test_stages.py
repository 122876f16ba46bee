"""Stage timings, and the progress line that only a terminal sees."""

from __future__ import annotations

import io
import time

import pytest

from nsysmap.core import timings as stages_module
from nsysmap.core.timings import Stages, is_terminal


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def fast_ticks(monkeypatch):
    monkeypatch.setattr(stages_module, "TICK_S", 0.01)
    monkeypatch.setattr(stages_module, "SHOW_AFTER_S", 0.0)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "xterm")


SLOW_S = 0.04  # a stage's length: several ticks of `fast_ticks`


def _slow_stage(stages: Stages) -> None:
    with stages.stage("attribute", "attributing"):
        time.sleep(SLOW_S)


def test_timings_add_up_per_stage():
    stages = Stages(stream=io.StringIO())
    _slow_stage(stages)
    _slow_stage(stages)
    stages.add("hash", 0.5)
    assert 2 * SLOW_S <= stages.timings["attribute"] < 2.0
    assert stages.timings["hash"] == 0.5


def test_no_progress_in_a_pipe_or_file(fast_ticks, tmp_path):
    pipe = io.StringIO()  # isatty() is False, as for a pipe
    _slow_stage(Stages(stream=pipe))
    assert pipe.getvalue() == ""
    with (tmp_path / "log.txt").open("w") as log:
        assert not is_terminal(log)
        _slow_stage(Stages(stream=log))
    assert (tmp_path / "log.txt").read_text() == ""


def test_progress_on_a_terminal_is_one_line_cleared_at_the_end(fast_ticks):
    tty = FakeTerminal()
    _slow_stage(Stages(stream=tty))
    out = tty.getvalue()
    assert "nsysmap: attributing" in out and " s" in out
    assert "\n" not in out and out.endswith("\r\x1b[K")


def test_progress_alone_shows_the_line_and_records_no_time(fast_ticks):
    """For a body that times its interleaved stages itself (the flow's blocks)."""
    tty = FakeTerminal()
    stages = Stages(stream=tty)
    with stages.progress("attributing"):
        time.sleep(SLOW_S)
    assert "nsysmap: attributing" in tty.getvalue() and tty.getvalue().endswith("\r\x1b[K")
    assert stages.timings == {}


def test_no_progress_in_ci_logs_even_on_a_terminal(fast_ticks, monkeypatch):
    monkeypatch.setenv("CI", "true")
    tty = FakeTerminal()
    _slow_stage(Stages(stream=tty))
    assert tty.getvalue() == ""


def test_short_stages_show_nothing(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    tty = FakeTerminal()
    with Stages(stream=tty).stage("read"):
        pass
    assert tty.getvalue() == ""
