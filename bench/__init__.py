"""Benchmarks of nsysmap (run on demand with `make bench` / `python -m bench`; never tests)."""
