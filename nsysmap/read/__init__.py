"""Reading profiles into the normalised `Profile`.

`nsys_*` modules read Nsight Systems SQLite exports (the only code that knows
how nsys versions differ); `torch_*` modules read torch.profiler traces.
"""
