"""Runs inside the training process: NVTX ranges for steps, phases and modules."""
