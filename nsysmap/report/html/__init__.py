"""The HTML report: charts built from the report's answers (figures), assembled into one page."""
