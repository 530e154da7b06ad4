"""Private numerics of the statistics core.

One concept per module, each stating its maths in its docstring:

``bootstrap``
    Cell medians and their confidence intervals (exact order statistics for one
    session, the hierarchical cluster bootstrap for several).
``resample``
    Bootstrap replicates of cell medians, for analyses that need the draws.
``intervals``
    Cell levels and variances, between-cell variance, trend contrasts and the
    anomalous-interval tests.
``changepoints``
    Robust smooth trends and the penalised segmentation of a curve (ruptures).
``flank_test``
    Tests of a fixed interval against the trend of its flanks.

Nothing here is public API: the analyses in :mod:`regimes` are.
"""
