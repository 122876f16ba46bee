"""`nsysmap report`: answers to the questions people profile GPT-2 for,
computed from attributed outputs (pure), rendered as Markdown."""
