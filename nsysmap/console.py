"""The `nsysmap` console script: the CLI with Ctrl-C taken from its first line.

The console script starts here rather than in nsysmap.cli, whose imports
(Polars, PyArrow, click, every command) take a while: this module imports
only the standard library and nsysmap.core.interrupts, and takes SIGINT before
importing the CLI. Wherever a Ctrl-C lands, nsysmap prints one line and
exits with 130:

    imports, the command   KeyboardInterrupt: `nsysmap: interrupted` (nsysmap.cli
                           adds "the outputs in DIR are complete" once a commit
                           put them in place)
    the command's end      the same, with the outputs it wrote named complete
    exit (teardown)        noted, then answered by the last exit handler, which
                           first makes SIGINT ignored: from then on the process
                           only exits, with its code

Only the interpreter's own start-up, before this module runs (a few tens of
milliseconds), is left to Python. The allocators are set to hand freed
memory back (nsysmap.core.allocator) before Polars is first imported.
"""

from __future__ import annotations

from collections.abc import Sequence

from nsysmap.core import allocator, interrupts


def main(argv: Sequence[str] | None = None) -> None:
    """Run `nsysmap ARGV` (sys.argv by default) and exit with its code."""
    interrupts.answered(lambda: _command(argv))


def _command(argv: Sequence[str] | None) -> int:
    allocator.hand_back()  # before Polars loads: memory freed goes back (nsysmap.core.allocator)
    from nsysmap.cli import exit_code_of

    return exit_code_of(list(argv) if argv is not None else None)
