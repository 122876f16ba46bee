"""The one flow: its stages in order (`run_stages`), its public verbs, its result, its timings."""
