"""The console script's allocators hand freed memory back (nsysmap.core.allocator): Polars'
jemalloc is loaded with JEMALLOC_CONF, which no child process inherits, a setting of the
user's own is kept, and glibc's mmap threshold is fixed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from nsysmap.core import allocator

# Run in a fresh interpreter: Polars must not be loaded yet, and glibc's settings stay there.
PROBE = """
import json, os, sys
from nsysmap.core.allocator import JEMALLOC_ENV, hand_back
before = "polars" in sys.modules
took = hand_back()
print(json.dumps({"before": before, "took": took, "loaded": "polars" in sys.modules,
                  "env": os.environ.get(JEMALLOC_ENV), "again": hand_back()}))
"""


def _probe(env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def _env_without_conf() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != allocator.JEMALLOC_ENV}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and Linux only")
def test_polars_loads_with_the_setting_and_no_child_inherits_it():
    found = _probe(_env_without_conf())
    assert found["before"] is False and found["loaded"] is True
    assert found["took"] == {"jemalloc": True, "glibc": True}
    assert found["env"] is None  # unset again once Polars has loaded
    # Polars already loaded: jemalloc cannot be set any more; glibc still is.
    assert found["again"] == {"jemalloc": False, "glibc": True}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Polars' jemalloc: Linux")
def test_jemalloc_reads_the_setting_as_polars_loads():
    """A setting jemalloc does not know is reported when Polars loads: the setting
    reached it (were it read later, or never, nothing would be said)."""
    probe = (
        "from nsysmap.core import allocator\n"
        "allocator.JEMALLOC_CONF = 'no_such_option:1'\n"
        "allocator.hand_back()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=_env_without_conf(), capture_output=True, text=True
    )
    assert "Invalid conf pair: no_such_option:1" in done.stderr


def test_a_setting_of_the_users_own_is_kept():
    env = {**_env_without_conf(), allocator.JEMALLOC_ENV: "narenas:2"}
    found = _probe(env)
    assert found["took"]["jemalloc"] is False and found["env"] == "narenas:2"


def test_the_console_script_sets_them_before_the_cli_loads(monkeypatch):
    from nsysmap import console

    order: list[str] = []
    monkeypatch.setattr(allocator, "hand_back", lambda: order.append("allocator") or {})
    monkeypatch.setattr("nsysmap.cli.exit_code_of", lambda argv: order.append("cli") or 0)
    assert console._command(["--version"]) == 0
    assert order == ["allocator", "cli"]


@pytest.mark.dask
def test_local_workers_start_with_the_settings(monkeypatch):
    """A local cluster's worker processes (several reports) start with glibc's threshold
    in their environment before they start, and jemalloc's before Polars loads."""
    from nsysmap.many.cluster import GLIBC_ENV, ClusterPlan, connect

    for name in (allocator.JEMALLOC_ENV, GLIBC_ENV):  # unset, and as before once done
        monkeypatch.setenv(name, "")  # (the cluster sets glibc's in this process too)
        monkeypatch.delenv(name)
    plan = ClusterPlan(1, 1, 2 << 30, 1, "test")

    def seen() -> dict:
        return {
            name: os.environ.get(name)
            for name in (allocator.JEMALLOC_ENV, GLIBC_ENV, "POLARS_MAX_THREADS")
        }

    with connect(None, plan) as client:
        found = list(client.run(seen).values())
    assert found == [
        {
            allocator.JEMALLOC_ENV: allocator.JEMALLOC_CONF,
            GLIBC_ENV: str(allocator.GLIBC_MMAP_THRESHOLD),
            "POLARS_MAX_THREADS": "1",
        }
    ]
