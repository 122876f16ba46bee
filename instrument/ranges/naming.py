"""Range names that instrument/ emits: the formatting half of the naming contract.

The parsing half is `nsysmap/core/range_names.py`; tests/test_naming_roundtrip.py binds
the two. The grammar (documented in docs/naming.md):

    nsysmap:step:<int>                 one training step (index from 0)
    nsysmap:phase:<phase>              data, zero_grad, forward, loss, backward, optimizer
                                       (PHASES: instrument/phase_vocabulary.py)
    nsysmap:fwd:<Class>:<module.path>  a module's forward call
    nsysmap:bwd:<Class>:<module.path>  the same module's backward

The module path is the fully qualified name from `named_modules()`, "" for
the root module, and always comes last so it may contain any character.
This module must stay importable without torch.
"""

from __future__ import annotations

from instrument.phase_vocabulary import PHASES

PREFIX = "nsysmap"
DOMAIN = "nsysmap"  # NVTX domain of every range instrument/ emits
SEP = ":"
DIRECTIONS = {"forward": "fwd", "backward": "bwd"}


def step_range(step: int) -> str:
    """`nsysmap:step:3` for step 3."""
    if step < 0:
        raise ValueError(f"step index must be >= 0, got {step}")
    return f"{PREFIX}{SEP}step{SEP}{int(step)}"


def phase_range(phase: str) -> str:
    """`nsysmap:phase:forward` for the forward phase."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; expected one of {PHASES}")
    return f"{PREFIX}{SEP}phase{SEP}{phase}"


def module_range(direction: str, module_path: str, module_class: str) -> str:
    """`nsysmap:fwd:Conv1D:transformer.h.3.attn.c_attn` for a forward call."""
    tag = DIRECTIONS[direction]
    if not module_class or SEP in module_class:
        raise ValueError(f"module class name {module_class!r} is empty or contains {SEP!r}")
    return f"{PREFIX}{SEP}{tag}{SEP}{module_class}{SEP}{module_path}"
