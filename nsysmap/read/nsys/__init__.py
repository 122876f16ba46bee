"""The Nsight Systems SQLite reader: the only code that knows nsys exports and their SQL."""
