"""Private numerics of the statistics core: one concept per module, its maths in its docstring.

From the raw trials up:

``bootstrap``, ``resample``
    Cell medians with their confidence intervals, and bootstrap replicates of them.
``curves``
    Curve indexing shared by every analysis, and one curve's cells as arrays.
``levels``
    Cell levels on the log scale with moderated sampling variances.
``trends``
    The trend coordinate and robust polynomial trends.
``between_cell``
    The between-cell variance of a curve (the Qn scale).
``segmentation``
    Penalised l2 segmentation of detrended levels (ruptures).
``contrasts``
    Linear contrasts of levels and their Welch-Satterthwaite t tests.
``interval_tests``
    Intervals against their flank trend; shifts at change points.
``candidates``
    Candidate intervals, the ``min_ratio`` filter and the greedy non-overlapping choice.
``fixed_intervals``
    Intervals fixed in advance (speedup scans, backend comparisons).
``multitest``
    Benjamini-Hochberg control.
``anomaly_table``
    The schema of reported intervals.

Nothing here is public API: the analyses in :mod:`regimes` are.
"""
