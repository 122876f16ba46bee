"""bench.native_time: each native call's time goes to the nearest function of the package
on its stack, once, and not to the Python code it runs."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest

from bench.native_time import UNOWNED, NativeTime

HERE = Path(__file__).parent  # this folder stands for the package


def _sleeps(seconds: float) -> None:
    time.sleep(seconds)  # a native call made here: owned here


def _through_the_library(data: list[float]) -> float:
    return statistics.median(data)  # stdlib Python frames, then the native sort


def _runs_python_inside_a_native_call() -> None:
    # sorted() is one native call that runs the key, a Python function, per item;
    # the key's own native call (time.sleep) is its own, not sorted()'s.
    sorted([3, 1, 2], key=_slow_key)


def _slow_key(value: int) -> int:
    time.sleep(0.02)
    return value


def _owned(hook: NativeTime, name: str) -> float:
    found = [s for (owner, _), s in hook.owed.items() if owner.endswith(f".{name}")]
    return sum(found)


def test_a_native_call_is_owned_by_the_function_that_made_it():
    hook = NativeTime(str(HERE))
    with hook.running():
        _sleeps(0.05)
    assert _owned(hook, "_sleeps") >= 0.05
    top = hook.top(5)
    assert top[0]["function"] == f"{HERE.name}.test_native_time._sleeps"
    assert top[0]["line"] == _sleeps.__code__.co_firstlineno


def test_library_frames_between_pass_the_time_up_to_the_package():
    hook = NativeTime(str(HERE))
    with hook.running():
        _through_the_library([float(i) for i in range(200_000, 0, -1)])
    # statistics.median is Python outside the package: its native sort is asked for here
    assert _owned(hook, "_through_the_library") > 0
    assert not any("statistics" in owner for owner, _ in hook.owed)


def test_python_run_by_a_native_call_is_not_the_native_calls_time():
    hook = NativeTime(str(HERE))
    with hook.running():
        _runs_python_inside_a_native_call()
    slept = _owned(hook, "_slow_key")
    assert slept >= 0.06  # three sleeps of 0.02 s, each in the key that made it
    # sorted() itself: its own work, not the key's sleeps
    assert _owned(hook, "_runs_python_inside_a_native_call") < 0.02


def test_native_calls_outside_the_package_are_counted_apart():
    hook = NativeTime(str(HERE / "no_such_package"))
    with hook.running():
        _sleeps(0.01)
    assert hook.owed.get(UNOWNED, 0.0) >= 0.01
    assert hook.top(5) == []


def test_shares_are_of_every_native_call_timed():
    hook = NativeTime(str(HERE))
    with hook.running():
        _sleeps(0.03)
        _sleeps(0.01)
    (row,) = hook.top(5)
    assert row["share"] == pytest.approx(row["native_s"] / sum(hook.owed.values()))
    assert 0 < row["share"] <= 1


def test_the_hook_counts_how_long_it_ran_and_all_native_time():
    hook = NativeTime(str(HERE / "no_such_package"))
    with hook.running():
        _sleeps(0.02)
    assert hook.seconds >= hook.native_s() >= 0.02
