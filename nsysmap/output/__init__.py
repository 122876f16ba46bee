"""Summaries, the terminal summary, and the Parquet + manifest outputs."""
