"""Attribution: nest ranges, label them from their names, and give every GPU
operation the step, phase, module and range that launched it."""
