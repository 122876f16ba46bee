"""The summary tables of the attributed operations (pure), and their terminal text."""
