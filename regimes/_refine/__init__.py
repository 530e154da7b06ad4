"""Private numerics of :func:`regimes.refine_boundaries`.

The public facade is :mod:`regimes.refine`.

``sprt``
    the sequential probability ratio test that decides one probe budget;
``brackets``
    boundaries and their flank levels, read from a detection (and speedup) result;
``design``
    one boundary's bracket, its probes and the choice of the next probe;
``plan``
    the boundaries of one call, the evidence they share, the batches they ask for;
``oracle``
    a simulated probe oracle with a known injected interval (tests and benchmarks).
"""
