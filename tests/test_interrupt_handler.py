"""The console script's SIGINT handler (nsysmap.core.interrupts): raises once, then notes.

A Ctrl-C raises KeyboardInterrupt once; another while the first is answered
is only noted, until code that carries on after a Ctrl-C arms it again; a
Ctrl-C inside `deferred` is taken when the block ends. The whole commands
under SIGINT: tests/test_interrupts.py.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from nsysmap.core import interrupts


@pytest.fixture
def handler() -> Iterator[None]:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    saved = dict(interrupts._state)
    try:
        assert interrupts.install()
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        interrupts._state.update(saved)


def _ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def test_a_ctrl_c_raises_once_and_a_second_is_noted(handler):
    with pytest.raises(KeyboardInterrupt):
        _ctrl_c()
    _ctrl_c()  # while the first is answered: no exception
    assert interrupts.noted()
    assert interrupts.rearm()  # one came meanwhile
    with pytest.raises(KeyboardInterrupt):
        _ctrl_c()


def test_once_disarmed_a_ctrl_c_is_only_noted(handler):
    interrupts.disarm()
    _ctrl_c()
    assert interrupts.noted()


def test_a_ctrl_c_inside_deferred_is_taken_when_the_block_ends(handler):
    done = []
    with pytest.raises(KeyboardInterrupt), interrupts.deferred():
        _ctrl_c()
        done.append("the block ran to its end")
    assert done == ["the block ran to its end"]


def test_the_line_names_outputs_already_complete():
    interrupts.forget_completed()
    assert interrupts.interrupted_line() == "nsysmap: interrupted"
    interrupts.completed("out/run")
    assert interrupts.interrupted_line().endswith("the outputs in out/run are complete")
    interrupts.forget_completed()
