"""A stand-in for the `nsys` executable (Nsight Systems is not installed here).

`install(bin_dir)` writes an executable `nsys` into `bin_dir` whose shebang is
the running interpreter; put `bin_dir` first on PATH. It follows the command
lines nsysmap builds (see nsysmap/read/nsys/nsys_tool.py) and is steered by environment
variables:

    FAKE_NSYS_LOG          file that receives each invocation's argv, one JSON list a line
    FAKE_NSYS_EXPORT_FROM  SQLite file that `export` copies to its --output; `%q{RANK}` in it
                           is the RANK that `profile` ran the program with (kept in the report)
    FAKE_NSYS_NO_REPORT    when set, `profile` writes no report (nothing captured)
    FAKE_NSYS_EXPORT_FAIL  when set, `export` fails with a message on stderr

`profile` runs the program after its options (so the launcher really runs),
then writes a placeholder report at --output + ".nsys-rep" (`%q{NAME}` in
--output expanded from the environment, as nsys does) and exits with the
program's status.
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

from tests.fake_nsys.nsys_standin import VERSION as VERSION_LINE

STANDIN = Path(__file__).with_name("nsys_standin.py")
__all__ = ["STANDIN", "VERSION_LINE", "install"]


def install(bin_dir: Path) -> Path:
    """Write the `nsys` executable into `bin_dir`; returns its path."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "nsys"
    exe.write_text(
        f"#!{sys.executable}\n"
        "import runpy\n"
        f"runpy.run_path({str(STANDIN)!r}, {{'ARGV0': __file__}}, '__main__')\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe
