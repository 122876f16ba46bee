"""`python -m nsysmap`: the `nsysmap` command (also as `torchrun ... -m nsysmap run SCRIPT`),
through the console script, so that Ctrl-C is answered alike (nsysmap.console)."""

from nsysmap.console import main

main()
