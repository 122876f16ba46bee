"""`python -m nsysmap.cli ...`: the `nsysmap` command without the console script, with
Ctrl-C answered as the console script answers it (nsysmap.console; `python -m nsysmap`
takes it earlier, before the CLI's imports)."""

from nsysmap.console import main

main()
