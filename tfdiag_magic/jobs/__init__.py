"""A multi-worker job: the JSON reports of its workers, merged into one result
(``python -m tfdiag_magic merge reports/``, `tfdiag_magic.merge(paths)`), with the `straggler`
finding. Each worker is profiled as any script is; nothing here compares the clocks of
different machines: steps are aligned by index, and only durations are compared."""
