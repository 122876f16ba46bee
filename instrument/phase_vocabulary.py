"""The training phases: their names, their order and their colours, in one place.

instrument/ emits the phases as range names (instrument/ranges/naming.py,
driven by instrument/ranges/_phases.py); nsysmap parses them back
(nsysmap/core/range_names.py), inference names the coarser phases it can tell
from the kernel sequence alone (nsysmap/infer/), the HTML report and the
Perfetto export colour them. All of them import this module; nsysmap already
imports instrument's format modules (contract, compiled_doc) and instrument/
never imports nsysmap, so the vocabulary lives here. Like them it imports
neither torch nor polars.
"""

from __future__ import annotations

DATA = "data"
ZERO_GRAD = "zero_grad"
FORWARD = "forward"
LOSS = "loss"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
# Every phase a range may name, in the order a training step runs them.
PHASES = (DATA, ZERO_GRAD, FORWARD, LOSS, BACKWARD, OPTIMIZER)

# Inference (nsysmap.infer) tells fewer phases apart: zero_grad is data work to
# it and the loss forward work; OTHER is what it cannot place. The order is
# inference's own (a phase's index is its code there).
OTHER = "other"
INFERRED_PHASES = (FORWARD, BACKWARD, OPTIMIZER, DATA, OTHER)
# Each named phase as the inferred phase it compares with.
INFERRED_OF = {
    DATA: DATA,
    ZERO_GRAD: DATA,
    FORWARD: FORWARD,
    LOSS: FORWARD,
    BACKWARD: BACKWARD,
    OPTIMIZER: OPTIMIZER,
}

# Colours of the phases: in the HTML report (CSS colours) and in the Perfetto
# export (Chrome's reserved colour names, `cname`; a phase without one is
# drawn as `generic_work`).
HTML_COLOURS = {
    DATA: "#8c8c8c",
    ZERO_GRAD: "#c7b42c",
    FORWARD: "#1f77b4",
    LOSS: "#9467bd",
    BACKWARD: "#ff7f0e",
    OPTIMIZER: "#2ca02c",
    OTHER: "#bcbcbc",
}
TRACE_COLOURS = {
    DATA: "grey",
    ZERO_GRAD: "yellow",
    FORWARD: "thread_state_running",
    LOSS: "rail_animation",
    BACKWARD: "rail_load",
    OPTIMIZER: "good",
}
