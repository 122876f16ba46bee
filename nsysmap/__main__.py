"""`python -m nsysmap`: the `nsysmap` command (also as `torchrun ... -m nsysmap run SCRIPT`)."""

from nsysmap.cli import main

main()
