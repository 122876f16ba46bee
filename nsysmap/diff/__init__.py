"""`nsysmap diff`: two runs compared per phase, module, category and kernel, per step."""
