"""`nsysmap run`: profile a training script under nsys or torch.profiler."""
