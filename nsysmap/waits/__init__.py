"""Where the GPU waits: idle gaps per stream and step, their kinds, and launch cost.

`nsysmap.waits.tables.waits_tables` makes the tables; the schemas are in
nsysmap.waits.schema (re-exported by nsysmap.schemas); docs/waits.md explains them.
"""
