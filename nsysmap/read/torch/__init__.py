"""The torch.profiler trace reader (Kineto chrome-trace JSON) and compiled.json."""
