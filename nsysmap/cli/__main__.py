"""`python -m nsysmap.cli ...`: the `nsysmap` command without the console script."""

from nsysmap.cli import main

main()
