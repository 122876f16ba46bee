"""Where the GPU waits: idle gaps per stream and step, their kinds, and launch cost.

`nsysmap.waits.tables.waits_tables` makes the tables; the schemas are
nsysmap.core.schemas's IDLE, STREAM_IDLE and LAUNCH_COST; docs/waits.md explains them.
"""
