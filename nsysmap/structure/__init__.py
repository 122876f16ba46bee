"""The structure of a profile: regions, steps and passes, each with its span, evidence and
confidence, found once from everything the profile carries (docs/report.md, *The
structure model*).

    capture  |-- set-up --|------- warm-up -------|------ measured ------|- tail -|
    passes                 [fwd]                    [fwd] [fwd] [fwd]
    evidence  copies only   kernel sequence          range `timed_iterations`,
              before the                             kernel sequence
              first pass

`nsysmap.structure.model.build_structure` makes the table (STRUCTURE, written
as structure.parquet); `nsysmap.structure.table.assign` puts each operation in
its region, step and pass; `nsysmap.structure.words` says it in words for the
terminal summary, report.md, answers.json and the HTML page alike.
"""
