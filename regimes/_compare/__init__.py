"""Private parts of :func:`regimes.compare_runs`.

``sides``
    each run read, detected and reduced to cell levels per curve, with the variance of
    its run-level process effect, and the environment it measured in;
``anomalies``
    the anomalies of both runs paired along each curve and tested on both;
``shift``
    the new run over the base, per budget and as one uniform shift.
"""
