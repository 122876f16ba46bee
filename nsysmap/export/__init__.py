"""Exports of attributed operations to other tools' formats (Perfetto / Chrome trace events)."""
