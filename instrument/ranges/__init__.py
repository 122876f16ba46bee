"""Ranges: NVTX / torch.profiler ranges for steps, phases and module calls.

`session` installs and removes everything (`annotate`, `install`,
`uninstall`); `_phases` (step and phase rules), `_modules` (module hooks),
`_names` (module names and roots), `_state` (per-thread frame stacks),
`_patch`, `_compile` (staying invisible to torch.compile) and `emitters`
(where a range goes) do the work; `naming` formats the range names
(parsed by nsysmap/core/range_names.py). Importing this package does not import torch.
"""
