"""`python -m bench`: the attribution benchmark (see bench/README.md)."""

from bench.run import main

main()
