"""Private numerics of the statistics core: one concept per module, its maths in its docstring.

The regime model of detection (:mod:`regimes.detect`), from the trend up:

``smoother``
    The smooth trend: a penalised (Whittaker) smoother, with at most one hinge.
``stack``
    What selection reads of each smoother of a grid, stacked.
``intervals``
    The intervals of cells a regime may cover, and how a set of them is written.
``selection``
    Greedy forward selection of intervals, stopped by BIC (compiled).
``final_fit``
    The fit of each row with its chosen intervals (compiled).
``joint``
    Each row's smoother, first alone, then jointly with its regimes.
``offers``
    The smoothers offered to the curves of one grid.
``scan``
    The regime model of one grid, fitted to many rows at once.

The cell-level interval tests (the speedup, intervals fixed in advance), from the raw
trials up:

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
