"""`python -m nsysmap.cli ...`: the `nsysmap` command without the console script, with
Ctrl-C answered as the console script answers it once the commands are imported
(nsysmap.core.interrupts.answered; `python -m nsysmap` takes it before those imports)."""

from nsysmap.cli import exit_code_of
from nsysmap.core import interrupts

interrupts.answered(lambda: exit_code_of(None))
