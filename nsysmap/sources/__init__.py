"""Where the flow's normalised profiles come from: a file whole, by process or by window."""
